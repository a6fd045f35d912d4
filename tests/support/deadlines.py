"""End-to-end deadlines fitted to how busy the machine is when a query is submitted or waited for.

A test writes the cohort `phase_timeout_s` and the wait that are ample on the reference machine (2 cores running
the end-to-end tier's own workers). Beside other work (a CPU hog, `make test-loaded`) the same fleets answer
several times slower, and a fixed deadline aborts cohorts that would have finished. `slowdown()` measures the
machine now (fleet_sim.deadlines: one timed in-process secure aggregation) against REFERENCE_PER_PARTY_S;
`fit` multiplies a spec's phase deadline by it and `stretch` a wait — never shortening either. One timed aggregation
can land in a quiet second of a busy machine (it read 1.0 at load 8.3 once), so the slowdown is also never below what
the load average says (`load_slowdown`: the run queue per core against the tier's own on the reference machine), and
a long wait is stretched slice by slice as it goes (`stretched_wait`), not once at its start.
tests/e2e/conftest.py applies these to every `AnalystClient.submit`/`wait` in the end-to-end tier, and stretches each
test's pytest timeout alike.

A longer phase deadline changes nothing else the server decides (validity proofs are the default whatever the
deadline), so the test still tests what it wrote.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from fleet_sim import deadlines

REFERENCE_PER_PARTY_S = 0.020
"""The calibration's slowest phase per party on the reference machine (2 cores) while the tier's three workers
run: 15–27 ms measured at load ≈ 5 (8 ms idle). Two busy loops beside the tier give about 1.4× that."""
REFERENCE_LOAD_PER_CORE = 2.5
"""The 1-minute load average per core on the reference machine while the tier's three workers run (≈ 5 on 2 cores)."""
WAIT_SLICE_S = 30.0
"""`stretched_wait` re-reads the slowdown after each slice of this many reference seconds."""
MEASURE_EVERY_S = 90.0
"""A measurement is reused this long: each costs about a second of CPU on a busy machine, which three workers
measuring often would take from the tests themselves."""

_lock = threading.Lock()
_last: tuple[float, deadlines.MachineSpeed] | None = None


def speed() -> deadlines.MachineSpeed:
    """The machine's speed, measured at most MEASURE_EVERY_S ago."""
    global _last
    with _lock:
        if _last is None or time.monotonic() - _last[0] > MEASURE_EVERY_S:
            _last = (time.monotonic(), deadlines.measure())
        return _last[1]


def load_slowdown() -> float:
    """The slowdown the load average alone implies: runnable tasks per core against the reference's."""
    return os.getloadavg()[0] / ((os.cpu_count() or 1) * REFERENCE_LOAD_PER_CORE)


def slowdown() -> float:
    """How many times slower than the reference the machine is now (at least 1): the timed aggregation's ratio or
    the load average's, whichever is larger."""
    return max(1.0, speed().per_party_s / REFERENCE_PER_PARTY_S, load_slowdown())


T = TypeVar("T")


def stretched_wait(wait: Callable[[float], T], timeout_s: float, what: str) -> T:
    """`wait(seconds)` (which raises TimeoutError when its seconds pass) given `timeout_s` reference seconds in
    slices of WAIT_SLICE_S, each stretched by the slowdown as that slice starts: a machine that gets busier during
    a long wait gives it more time, as the fleets it waits for take more."""
    left, started = timeout_s, time.monotonic()
    while True:
        step = min(left, WAIT_SLICE_S)
        try:
            return wait(step * slowdown())
        except TimeoutError as exc:
            left -= step
            if left <= 0:
                raise TimeoutError(f"{what} after {time.monotonic() - started:.0f} s ({timeout_s:.0f} s on the "
                                   f"reference machine, stretched as the machine's load went)") from exc


def stretch(timeout_s: float) -> float:
    """A wait of `timeout_s` on the reference machine, for the machine now."""
    return timeout_s * slowdown()


def fit(spec: Any) -> Any:
    """`spec` with its cohort's phase deadline multiplied by `slowdown()` (0.1 s steps). A spec without a numeric
    deadline (a bad-input test, the server's default) is returned as it is."""
    cohort = spec.get("cohort") if isinstance(spec, dict) else None
    if not isinstance(cohort, dict):
        return spec
    given = cohort.get("phase_timeout_s")
    if not isinstance(given, (int, float)) or isinstance(given, bool):
        return spec
    factor = slowdown()
    if factor <= 1.0:
        return spec
    return {**spec, "cohort": {**cohort, "phase_timeout_s": round(given * factor, 1)}}
