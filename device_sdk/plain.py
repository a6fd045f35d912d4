"""Benchmark-only unmasked client (mirror of analytics_server/plain.py): sends its vector in the clear.

Used only when the assignment says mode "plain" *and* this process runs with FA_BENCH_UNMASKED=1, so a
server cannot talk an ordinary device out of masking.
"""

from __future__ import annotations

import os

import numpy as np

from secagg import encoding
from secagg.phases import Phase

BENCH_UNMASKED_ENV = "FA_BENCH_UNMASKED"


def plain_allowed() -> bool:
    return os.environ.get(BENCH_UNMASKED_ENV) == "1"


class PlainClient:
    def __init__(self, bits: int, vector: np.ndarray) -> None:
        self.bits = bits
        self.vector = vector
        self.phase = Phase.MASKED_INPUT

    def start(self) -> bytes:
        return encoding.pack(self.vector, self.bits)

    def receive(self, data: bytes) -> bytes | None:
        self.phase = Phase.DONE
        return None
