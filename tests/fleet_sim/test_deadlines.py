"""Deadlines from a measurement of the machine (fleet_sim.deadlines) and their use in the end-to-end tier
(tests/support/deadlines.py): larger cohorts and busier machines get longer phases; a test's own deadline is never
shortened; specs the tier sends on purpose malformed pass untouched."""

from __future__ import annotations

from typing import Any

import pytest

from fleet_sim import deadlines
from tests.support import deadlines as fitted

IDLE = deadlines.MachineSpeed(per_party_s=0.008, measured_s=0.5, load=0.1)
BUSY = deadlines.MachineSpeed(per_party_s=0.032, measured_s=2.0, load=8.0)  # 4× slower: a CPU hog beside the run


def test_a_busier_machine_and_a_larger_cohort_get_longer_phases() -> None:
    assert BUSY.phase_seconds(300) == pytest.approx(4 * IDLE.phase_seconds(300))
    assert IDLE.phase_seconds(300) > IDLE.phase_seconds(50) > IDLE.phase_seconds(5)
    assert IDLE.phase_seconds(300, processes=2) == pytest.approx(IDLE.phase_seconds(300) / 2)
    assert IDLE.phase_timeout(5, floor=6.0) == 6.0
    assert IDLE.phase_timeout(1000) == round(deadlines.SAFETY * IDLE.phase_seconds(1000), 1)


def test_a_real_measurement_is_positive_and_says_what_it_measured() -> None:
    speed = deadlines.measure()
    assert speed.per_party_s > 0 and speed.measured_s > 0
    assert f"{deadlines.CALIBRATION_PARTIES}-party" in speed.describe()


@pytest.fixture
def busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine that measures as BUSY, with a load average that implies no slowdown of its own."""
    monkeypatch.setattr(fitted, "speed", lambda: BUSY)
    monkeypatch.setattr(fitted, "load_slowdown", lambda: 0.5)


def _spec(**privacy: Any) -> dict[str, Any]:
    return {"kind": "histogram", "privacy": privacy or {"mechanism": "none"},
            "cohort": {"min_clients": 200, "max_clients": 1000, "phase_timeout_s": 20}}


def test_a_busy_machine_stretches_deadlines_and_waits(busy: None) -> None:
    factor = BUSY.per_party_s / fitted.REFERENCE_PER_PARTY_S
    spec = _spec()
    out = fitted.fit(spec)
    assert out["cohort"]["phase_timeout_s"] == round(20 * factor, 1) > 20
    assert out["privacy"] == spec["privacy"]  # nothing else changed
    assert spec["cohort"]["phase_timeout_s"] == 20  # not mutated
    assert fitted.stretch(100) == pytest.approx(100 * factor)


def test_an_idle_machine_and_bad_input_are_left_alone(busy: None, monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ({**_spec(), "cohort": {"phase_timeout_s": "5"}}, {**_spec(), "cohort": {"phase_timeout_s": True}},
                {"cohort": [1]}, [1, 2], {**_spec(), "cohort": {"min_clients": 3}}):
        assert fitted.fit(bad) is bad
    monkeypatch.setattr(fitted, "speed", lambda: IDLE)
    spec = _spec()
    assert fitted.fit(spec) is spec and fitted.stretch(100) == 100


def test_a_measurement_taken_in_a_quiet_second_does_not_hide_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fitted, "speed", lambda: IDLE)
    monkeypatch.setattr(fitted.os, "getloadavg", lambda: (8.0, 8.0, 8.0))
    monkeypatch.setattr(fitted.os, "cpu_count", lambda: 2)
    assert fitted.slowdown() == pytest.approx(8.0 / (2 * fitted.REFERENCE_LOAD_PER_CORE)) and fitted.slowdown() > 1
    monkeypatch.setattr(fitted.os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert fitted.slowdown() == 1.0


def test_a_long_wait_is_stretched_by_the_load_as_it_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    factors = iter([1.0, 1.0, 3.0, 3.0, 3.0, 3.0])
    monkeypatch.setattr(fitted, "slowdown", lambda: next(factors))
    asked: list[float] = []

    def never(seconds: float) -> str:
        asked.append(seconds)
        raise TimeoutError

    with pytest.raises(TimeoutError, match="still running after"):
        fitted.stretched_wait(never, 100, "still running")
    # 100 reference seconds in 30 s slices; the machine got 3× slower after the second slice
    assert asked == [30.0, 30.0, 90.0, 30.0]

    calls: list[float] = []

    def second_slice_answers(seconds: float) -> str:
        calls.append(seconds)
        if len(calls) < 2:
            raise TimeoutError
        return "done"

    factors = iter([2.0, 2.0])
    assert fitted.stretched_wait(second_slice_answers, 100, "x") == "done" and calls == [60.0, 60.0]
