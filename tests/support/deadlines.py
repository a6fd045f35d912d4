"""End-to-end deadlines fitted to this machine as it is when a query is submitted.

A test writes the cohort `phase_timeout_s` that is ample on an idle 2-core machine. Beside other work (CI's own
parallel tier, a CPU hog) the same fleet answers several times slower, and a fixed deadline aborts cohorts that
would have finished. So every fleet the tests start (`Fleet`, `JsFleet`) is counted per server URL here, and
`fit(spec, url)` raises the spec's phase deadline to what a measurement of the machine now says that server's
fleets need (fleet_sim.deadlines, with TEST_SAFETY), never lowering it. `fitted_wait` stretches a wait by the
same factor. tests/e2e/conftest.py applies both to every `AnalystClient.submit`/`wait` in the end-to-end tier.

On an idle machine the measurement stays below the tests' own deadlines, so nothing changes there.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import Any

from fleet_sim import deadlines

TEST_SAFETY = 3.0
"""Measured expectation × this: the tests' own deadlines are about 3× what an idle machine needs."""
MEASURE_EVERY_S = 30.0
"""A measurement is reused this long (each takes about half a second, longer the busier the machine)."""

_lock = threading.Lock()
_devices: Counter[str] = Counter()
_processes: Counter[str] = Counter()
_last: tuple[float, deadlines.MachineSpeed] | None = None
_factors: dict[str, float] = {}


def _key(url: str) -> str:
    return url.rstrip("/")


def fleet_started(urls: str | list[str], devices: int, processes: int = 1) -> None:
    """Count a fleet of `devices` in `processes` processes against each of `urls` (comma-separated or a list)."""
    with _lock:
        for url in urls.split(",") if isinstance(urls, str) else urls:
            _devices[_key(url)] += devices
            _processes[_key(url)] += processes


def fleet_stopped(urls: str | list[str], devices: int, processes: int = 1) -> None:
    with _lock:
        for url in urls.split(",") if isinstance(urls, str) else urls:
            _devices[_key(url)] -= devices
            _processes[_key(url)] -= processes


def speed() -> deadlines.MachineSpeed:
    """The machine's speed, measured at most MEASURE_EVERY_S ago."""
    global _last
    with _lock:
        if _last is None or time.monotonic() - _last[0] > MEASURE_EVERY_S:
            _last = (time.monotonic(), deadlines.measure())
        return _last[1]


def fit(spec: dict[str, Any], server_url: str) -> tuple[dict[str, Any], float]:
    """(`spec` with its cohort's phase deadline at least what the fleets running against `server_url` need now,
    the factor it was raised by). A spec without fleets, without a cohort block or with a non-numeric deadline
    (a bad-input test) is returned as it is."""
    cohort = spec.get("cohort") if isinstance(spec, dict) else None
    with _lock:
        devices, processes = _devices[_key(server_url)], _processes[_key(server_url)]
    if not isinstance(cohort, dict) or devices <= 0:
        return spec, 1.0
    given = cohort.get("phase_timeout_s", 60.0)
    max_clients = cohort.get("max_clients", devices)
    if not isinstance(given, (int, float)) or isinstance(given, bool) or not isinstance(max_clients, int):
        return spec, 1.0
    size = min(max_clients, devices)
    cpus = min(processes, os.cpu_count() or 1)
    needed = round(TEST_SAFETY * speed().phase_seconds(size, cpus), 1)
    if needed <= given:
        return spec, 1.0
    return {**spec, "cohort": {**cohort, "phase_timeout_s": needed}}, needed / given


def remember(query_id: str, factor: float) -> None:
    """The factor a query's deadlines were raised by (for `fitted_wait`)."""
    if factor > 1.0:
        with _lock:
            _factors[query_id] = factor


def fitted_wait(query_id: str, timeout_s: float) -> float:
    """A wait for `query_id`, stretched by the factor its phase deadlines were raised by."""
    with _lock:
        return timeout_s * _factors.get(query_id, 1.0)
