"""Optional cost accounting (time in PRG, key agreement, Shamir and signatures; PRG bytes) for benchmarks.

The clock is supplied by the caller, so the protocol code itself never reads time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field


@dataclass
class CostMeter:
    clock: Callable[[], float]
    seconds: dict[str, float] = field(default_factory=lambda: {"prg": 0.0, "key_agreement": 0.0, "shamir": 0.0,
                                                                    "signatures": 0.0})
    prg_bytes: int = 0

    @contextmanager
    def measure(self, kind: str, nbytes: int = 0) -> Iterator[None]:
        start = self.clock()
        try:
            yield
        finally:
            self.seconds[kind] = self.seconds.get(kind, 0.0) + self.clock() - start
            self.prg_bytes += nbytes


class NullMeter:
    """The default: measures nothing."""

    def measure(self, kind: str, nbytes: int = 0) -> AbstractContextManager[None]:  # noqa: ARG002
        return nullcontext()


Meter = CostMeter | NullMeter
