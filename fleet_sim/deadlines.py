"""How long a simulated fleet needs for a cohort phase on this machine now, measured rather than guessed.

A cohort phase ends when every device of the cohort has answered or when its `phase_timeout_s` passes. A fleet
that simulates hundreds of devices in a few processes answers at the speed of this machine's CPU as it is right
now: on a busy 2-core machine the same phase takes several times as long. `measure()` times one in-process secure
aggregation of CALIBRATION_PARTIES parties (it slows down as the machine gets busier, as the fleet will) and
`MachineSpeed.phase_timeout` turns that into a deadline for a cohort: the per-party work of the slowest phase,
scaled to the neighbourhood of a cohort of that size and to the devices one fleet process computes in turn, times
SAFETY, never below the floor asked for.

Used by `make demo` (scripts/demo_server.py) and by the end-to-end tests (tests/support/deadlines.py), so that
neither fails on a busy machine because of a deadline written for an idle one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from secagg.config import SecAggConfig
from secagg.randomness import SeededRandom
from secagg.simulate import run_session

CALIBRATION_PARTIES = 32
FLEET_OVERHEAD = 3.0
"""A fleet device's phase costs about this many times the in-process protocol work per neighbour (HTTP, JSON, request
signatures, message copies, one event loop for many devices): 0.24 ms per device and neighbour in the share-keys phase
of a 300-device cohort over HTTP on two fleet processes, 0.075 ms in process (2026-11-29)."""
SAFETY = 4.0
"""Fleet devices also do HTTP, JSON and signatures beside the crypto, and the server works beside them; a deadline
is a bound, not a wait."""


@lru_cache(maxsize=64)
def _neighbourhood(parties: int) -> int:
    """The size of one party's closed neighbourhood in a session of `parties` (SecAgg+ graphs grow slower than n)."""
    config = SecAggConfig(b"\0" * 16, max(parties, 2), 16, 20, threat_model="active")
    return config.neighbourhood_size


@dataclass(frozen=True)
class MachineSpeed:
    """One measurement of this machine: the slowest phase's work per party of a CALIBRATION_PARTIES-party session."""

    per_party_s: float
    measured_s: float
    """The whole calibration session's wall time."""
    load: float
    """The 1-minute load average when it was taken."""

    def phase_seconds(self, cohort: int, processes: int = 1) -> float:
        """The expected wall time of a cohort's slowest phase: `cohort` devices computed by `processes` fleet
        processes (each computes its share of the devices in turn)."""
        neighbours = _neighbourhood(cohort) / _neighbourhood(CALIBRATION_PARTIES)
        return FLEET_OVERHEAD * self.per_party_s * neighbours * max(cohort, 1) / max(processes, 1)

    def phase_timeout(self, cohort: int, processes: int = 1, floor: float = 0.0) -> float:
        """A phase deadline for such a cohort: SAFETY × the expected phase time, at least `floor` (0.1 s steps)."""
        return round(max(floor, SAFETY * self.phase_seconds(cohort, processes)), 1)

    def describe(self) -> str:
        """One line: what was measured, at which load."""
        return (f"{CALIBRATION_PARTIES}-party secagg in {self.measured_s:.2f} s at load {self.load:.1f}: slowest "
                f"phase {self.per_party_s * 1000:.1f} ms/party")


def measure() -> MachineSpeed:
    """Time one in-process secure aggregation now (a few hundred milliseconds on an idle machine)."""
    rng = SeededRandom(b"fleet_sim.deadlines/calibration")
    config = SecAggConfig(rng.child("session").bytes(16), CALIBRATION_PARTIES, 16, 20, threat_model="active")
    inputs = {p: np.arange(16, dtype=np.uint64) for p in range(1, CALIBRATION_PARTIES + 1)}
    started = time.perf_counter()
    report = run_session(config, inputs, randomness=rng, clock=time.perf_counter)
    measured = time.perf_counter() - started
    return MachineSpeed(max(report.client_s.values()) / CALIBRATION_PARTIES, measured, os.getloadavg()[0])
