"""The one injectable clock: wall time, monotonic time and an async sleep, the way `secagg.randomness` is the
one injectable source of randomness.

Standard library only, so that the server, the issuer and the device SDK may all import it without importing
each other. `SystemClock` reads the real clocks and is the default everywhere; `ManualClock` is a
fake for tests: its time moves only when `advance` is called, and `sleep` wakes when the clock has been
advanced past the sleeper's deadline, so a test that would have slept for a fixed time advances the clock
instead.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Where every time read of the server, the issuer and the device SDK goes."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch (timestamps that are stored or sent)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines and intervals)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time."""
        ...


class SystemClock:
    """The real clocks: `time.time`, `time.monotonic` and `asyncio.sleep`."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A fake clock for tests: starts at `start` (wall) and 0 (monotonic) and moves only on `advance`.

    `sleep` suspends until the clock has been advanced to the sleeper's deadline; `sleep(0)` or a negative
    time only yields to the event loop. Both clocks move together, by the same amount."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._wall = float(start)
        self._mono = 0.0
        self._order = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    def time(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def set_time(self, wall: float) -> None:
        """Move the wall clock alone (a device whose clock was changed); the monotonic clock stays."""
        self._wall = float(wall)

    def advance(self, seconds: float) -> None:
        """Move both clocks forward and wake every sleeper whose deadline is reached."""
        if seconds < 0:
            raise ValueError("a clock cannot go back: seconds must be >= 0")
        self._wall += seconds
        self._mono += seconds
        while self._sleepers and self._sleepers[0][0] <= self._mono:
            _, _, waiter = heapq.heappop(self._sleepers)
            if not waiter.done():
                waiter.set_result(None)

    @property
    def sleepers(self) -> int:
        """How many tasks wait in `sleep` (a test advances once the code under test is waiting)."""
        return sum(1 for _, _, w in self._sleepers if not w.done())

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._order), waiter))
        await waiter


SYSTEM_CLOCK: Clock = SystemClock()
