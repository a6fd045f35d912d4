"""Devices that checked in recently and are free, and the hand-over of assignments to them.

A device is available while it long-polls a check-in, or for `fresh_s` after its last check-in. Cohort
formation takes devices from here; `assign` marks them busy and wakes their long-poll. Busy devices are
released when their cohort ends.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING

from queries.envelope import Assignment

if TYPE_CHECKING:
    from analytics_server.cohort import CohortRuntime

_jitter = random.Random()


class DevicePool:
    def __init__(self, fresh_s: float) -> None:
        self.fresh_s = fresh_s
        self._seen: dict[str, float] = {}
        self._waiters: dict[str, asyncio.Future[Assignment]] = {}
        self.busy: dict[str, CohortRuntime] = {}
        self.pending: dict[str, Assignment] = {}

    def touch(self, device_id: str) -> None:
        self._seen[device_id] = time.monotonic()

    def available(self) -> list[str]:
        cutoff = time.monotonic() - self.fresh_s
        stale = [d for d, t in self._seen.items() if t < cutoff and d not in self._waiters]
        for d in stale:
            del self._seen[d]
        return [d for d in self._seen if d not in self.busy]

    def assign(self, device_id: str, assignment: Assignment, cohort: CohortRuntime) -> None:
        self.busy[device_id] = cohort
        self.pending[device_id] = assignment
        self._seen.pop(device_id, None)
        fut = self._waiters.pop(device_id, None)
        if fut is not None and not fut.done():
            fut.set_result(assignment)

    def release(self, device_ids: list[str], cohort: CohortRuntime) -> None:
        for d in device_ids:
            if self.busy.get(d) is cohort:
                del self.busy[d]
                self.pending.pop(d, None)

    def current(self, device_id: str) -> Assignment | None:
        """The assignment of a busy device that is still expected to answer (re-delivered on check-in)."""
        cohort = self.busy.get(device_id)
        if cohort is None or not cohort.still_expects(device_id):
            return None
        return self.pending.get(device_id)

    async def wait(self, device_id: str, wait_s: float) -> Assignment | None:
        self.touch(device_id)
        if device_id in self.busy:
            return None
        if wait_s <= 0:
            return None
        old = self._waiters.pop(device_id, None)
        if old is not None and not old.done():
            old.cancel()
        fut: asyncio.Future[Assignment] = asyncio.get_running_loop().create_future()
        self._waiters[device_id] = fut
        try:  # jittered so a fleet's long-polls do not stay synchronised into bursts
            return await asyncio.wait_for(asyncio.shield(fut), wait_s * (0.5 + 0.5 * _jitter.random()))
        except TimeoutError:
            return fut.result() if fut.done() and not fut.cancelled() else None
        finally:
            if self._waiters.get(device_id) is fut:
                del self._waiters[device_id]
            if device_id not in self.busy:
                self.touch(device_id)
