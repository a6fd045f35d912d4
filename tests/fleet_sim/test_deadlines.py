"""Deadlines from a measurement of the machine (fleet_sim.deadlines) and their use in the end-to-end tier
(tests/support/deadlines.py): larger cohorts and busier machines get longer phases; a test's own deadline is never
shortened; specs the tier sends on purpose malformed pass untouched."""

from __future__ import annotations

from collections.abc import Iterator
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
def busy(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A server URL with a 300-device fleet, on a machine that measures as BUSY."""
    monkeypatch.setattr(fitted, "speed", lambda: BUSY)
    url = "http://127.0.0.1:1/"
    fitted.fleet_started(url, 300)
    yield url
    fitted.fleet_stopped(url, 300)


def _spec(**cohort: Any) -> dict[str, Any]:
    return {"kind": "histogram", "cohort": {"min_clients": 200, "max_clients": 1000, **cohort}}


def test_a_busy_machine_raises_the_phase_deadline_and_stretches_the_wait(busy: str) -> None:
    spec = _spec(phase_timeout_s=20)
    out, factor = fitted.fit(spec, busy.rstrip("/"))
    needed = round(fitted.TEST_SAFETY * BUSY.phase_seconds(300), 1)
    assert out["cohort"]["phase_timeout_s"] == needed > 20 and factor == pytest.approx(needed / 20)
    assert spec["cohort"]["phase_timeout_s"] == 20  # not mutated
    fitted.remember("q-busy", factor)
    assert fitted.fitted_wait("q-busy", 100) == pytest.approx(100 * factor)
    assert fitted.fitted_wait("q-other", 100) == 100


def test_a_longer_deadline_a_server_without_fleets_and_bad_input_are_left_alone(busy: str) -> None:
    assert fitted.fit(_spec(phase_timeout_s=600), busy) == (_spec(phase_timeout_s=600), 1.0)
    assert fitted.fit(_spec(phase_timeout_s=5), "http://127.0.0.1:2") == (_spec(phase_timeout_s=5), 1.0)
    for bad in (_spec(phase_timeout_s="5"), _spec(phase_timeout_s=True), {"cohort": [1]}, [1, 2]):
        assert fitted.fit(bad, busy) == (bad, 1.0)  # type: ignore[arg-type]


def test_the_cohort_is_at_most_the_devices_running(busy: str) -> None:
    small, _ = fitted.fit(_spec(phase_timeout_s=1, max_clients=50), busy)
    large, _ = fitted.fit(_spec(phase_timeout_s=1), busy)
    assert small["cohort"]["phase_timeout_s"] < large["cohort"]["phase_timeout_s"]
    assert large["cohort"]["phase_timeout_s"] == round(fitted.TEST_SAFETY * BUSY.phase_seconds(300), 1)
