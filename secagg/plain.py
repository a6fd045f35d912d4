"""Benchmark-only unmasked aggregation, both sides: a sans-IO client/server pair with the interface of
`ClientSession`/`ServerSession`, one phase (masked input, sent in the clear), no masks.

`make bench` uses it to report what masking costs. Nothing on the wire selects it: the benchmark builds each
side for it from `FA_BENCH_UNMASKED=1` in that side's own environment — `fa-server` passes `unmasked=True` to
its orchestrator, `fa-sim` gives its devices `DeviceHooks(session_factory=device_sdk.sessions.UNMASKED)` — so neither
a query nor a server can talk an ordinary device out of masking.
"""

from __future__ import annotations

import os

import numpy as np

from secagg import encoding
from secagg.config import SecAggConfig
from secagg.errors import AbortError, ConflictError, UnknownPartyError, WrongPhaseError
from secagg.messages import max_client_message_size
from secagg.phases import Phase
from secagg.server import AggregateResult

BENCH_UNMASKED_ENV = "FA_BENCH_UNMASKED"


def bench_unmasked() -> bool:
    """True when this process runs with the benchmark switch `FA_BENCH_UNMASKED=1`."""
    return os.environ.get(BENCH_UNMASKED_ENV) == "1"


class PlainClientSession:
    """Sends its vector packed in the clear; the server's answer ends the session."""

    def __init__(self, bits: int, vector: np.ndarray) -> None:
        self.bits = bits
        self.vector = vector
        self.phase = Phase.MASKED_INPUT

    def start(self) -> bytes:
        return encoding.pack(self.vector, self.bits)

    def receive(self, data: bytes) -> bytes | None:
        self.phase = Phase.DONE
        return None


class PlainServerSession:
    """Adds the parties' clear vectors; `close_phase` ends the session (or aborts below `min_survivors`). Built from
    the cohort's `SecAggConfig` like `ServerSession` (`from_config`), of which it reads n, dim, bits and the survivor
    threshold only."""

    def __init__(self, n: int, dim: int, bits: int, min_survivors: int) -> None:
        self.n, self.dim, self.bits, self.min_survivors = n, dim, bits, min_survivors
        self.phase = Phase.MASKED_INPUT
        self._expected = frozenset(range(1, n + 1))
        self._got: dict[int, bytes] = {}
        self._acc = np.zeros(dim, dtype=np.uint64)
        self.result: AggregateResult | None = None

    @classmethod
    def from_config(cls, config: SecAggConfig) -> PlainServerSession:
        return cls(config.n, config.dim, config.bits, config.survivor_threshold)

    @property
    def survivor_threshold(self) -> int:
        """Fewest parties with which the phase may close."""
        return self.min_survivors

    def max_message_size(self, proof_bytes: int = 0) -> int:
        """Largest message a party can send: its packed vector (no keys, no proofs)."""
        return max_client_message_size(self.dim, self.bits, 0)

    def close_ready(self) -> bool:
        """Whether closing now would not abort (nothing else is lost by closing a one-phase session early)."""
        return self.phase is Phase.MASKED_INPUT and len(self._got) >= self.min_survivors

    def expected(self) -> frozenset[int]:
        return self._expected

    def received(self) -> frozenset[int]:
        return frozenset(self._got)

    def received_count(self) -> int:
        return len(self._got)

    def has_answered(self, party: int) -> bool:
        return party in self._got

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
        if len(self._got) < self.min_survivors:
            self.phase = Phase.ABORTED
            raise AbortError(Phase.MASKED_INPUT.label, self.min_survivors, len(self._got))
        mask = np.uint64((1 << self.bits) - 1)
        dropped = {Phase.MASKED_INPUT: self._expected - frozenset(self._got)}
        self.result = AggregateResult(self._acc & mask, frozenset(self._got), dropped)
        self.phase = Phase.DONE
        return {}
