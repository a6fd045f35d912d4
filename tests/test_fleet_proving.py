"""devstack/proving.py: a spec that leaves its validation to the server keeps proofs while the simulated fleet
can prove for a cohort in time (its phases grow by that time), and asks for "none" beyond the cap; a spec that names
its mode, or has no numeric deadline, is left as it is."""

from __future__ import annotations

from typing import Any

import pytest

from devstack import proving

HIST: dict[str, Any] = {"kind": "histogram", "source": "words", "params": {"buckets": ["a", "b", "c"]},
                        "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
                        "cohort": {"min_clients": 100, "max_clients": 1000, "phase_timeout_s": 10}}


def test_the_measurement_is_the_servers_statement_proved() -> None:
    assert proving.proving_seconds(HIST) > 0
    assert proving.proving_seconds({**HIST, "privacy": {**HIST["privacy"], "validation": "none"}}) == 0
    assert proving.proving_seconds({**HIST, "params": {}}) == 0  # refused by the server: nothing to prove


def test_proofs_kept_with_longer_phases_or_turned_off_past_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proving, "proving_seconds", lambda spec: 0.01)  # 10 s for 1,000 devices on one process
    kept, note = proving.fit(HIST, 1, cap_s=30)
    assert "validation" not in kept["privacy"] and kept["cohort"]["phase_timeout_s"] == 10 + 2 * 10.0
    assert note and "20 s more" in note
    kept, _ = proving.fit(HIST, 2, cap_s=30)  # two processes: half the time
    assert kept["cohort"]["phase_timeout_s"] == 10 + 2 * 5.0
    off, note = proving.fit(HIST, 1, cap_s=5)
    assert off["privacy"]["validation"] == "none" and off["cohort"] == HIST["cohort"]
    assert note and "proofs off" in note
    assert HIST["privacy"] == {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6}  # not mutated


def test_named_modes_and_odd_specs_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proving, "proving_seconds", lambda spec: pytest.fail("measured"))
    for spec in ({**HIST, "privacy": {**HIST["privacy"], "validation": "proofs"}},
                 {**HIST, "cohort": {"phase_timeout_s": "5"}}, {**HIST, "cohort": [1]}, {**HIST, "privacy": [1]}):
        assert proving.fit(spec, 1, 30) == (spec, None)


def test_a_cheap_proof_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proving, "proving_seconds", lambda spec: 1e-6)
    assert proving.fit(HIST, 1, 30) == (HIST, None)
