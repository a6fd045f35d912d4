"""Benchmark-only unmasked aggregation: same interface as `secagg.ServerSession`, one phase, no masks.

Selected only when the server process runs with FA_BENCH_UNMASKED=1 (see settings.bench_unmasked), so
`make bench` can report the cost of masking. No query field can select it, and devices refuse it unless
their own process has the same switch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secagg import encoding
from secagg.errors import ConflictError, UnknownPartyError, WrongPhaseError
from secagg.phases import Phase


@dataclass(frozen=True)
class PlainResult:
    vector: np.ndarray
    contributors: frozenset[int]
    dropped: dict[Phase, frozenset[int]]


class PlainSession:
    def __init__(self, n: int, dim: int, bits: int, min_survivors: int) -> None:
        self.n, self.dim, self.bits, self.min_survivors = n, dim, bits, min_survivors
        self.phase = Phase.MASKED_INPUT
        self._expected = frozenset(range(1, n + 1))
        self._got: dict[int, bytes] = {}
        self._acc = np.zeros(dim, dtype=np.uint64)
        self.result: PlainResult | None = None

    def expected(self) -> frozenset[int]:
        return self._expected

    def received(self) -> frozenset[int]:
        return frozenset(self._got)

    def receive(self, party: int, data: bytes) -> None:
        if self.phase is not Phase.MASKED_INPUT:
            raise WrongPhaseError("session is closed")
        if party not in self._expected:
            raise UnknownPartyError(f"party {party} is not part of this cohort")
        if party in self._got:
            if self._got[party] == data:
                return
            raise ConflictError(f"party {party} already sent a different input")
        vec = encoding.unpack(data, self.dim, self.bits)
        self._acc += vec
        self._got[party] = data

    def close_phase(self) -> dict[int, bytes]:
        from secagg.errors import AbortError

        if len(self._got) < self.min_survivors:
            self.phase = Phase.ABORTED
            raise AbortError("masked_input", self.min_survivors, len(self._got))
        mask = np.uint64((1 << self.bits) - 1)
        dropped = {Phase.MASKED_INPUT: self._expected - frozenset(self._got)}
        self.result = PlainResult(self._acc & mask, frozenset(self._got), dropped)
        self.phase = Phase.DONE
        return {}
