"""Devices' availability and the hand-over of assignments to them, shared by every server process.

A check-in (at any process) marks the device available in the database for its long-poll plus `fresh_s`
plus twice the current check-in lag (check-ins arriving together are read and written in one statement each:
`Batcher`).
The process forming a cohort claims free devices there and stores their assignments with the cohort
(`Store.claim_devices`, `Store.create_cohort`), then publishes the cohort id (`notify.ASSIGN`); the process
holding a member's long-poll reads the assignment and answers. A notification that is lost is made up by
polling the database for this process's waiters every `POLL_S`. A device claimed by a cohort is re-sent its
assignment when it checks in again, until the cohort ends or drops it (`Store.release_devices`).
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

from analytics_server.db.batching import Batcher
from analytics_server.db.store import Store
from analytics_server.notify import ASSIGN, Notifier
from queries.envelope import Assignment
from secagg.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)
POLL_S = 1.0
AVAILABILITY_SLACK_S = 5.0
"""How long past its long-poll (and the Retry-After it was told) a device still counts as available, on top
of twice the time check-ins currently take to reach the database (`DevicePool.lag_s`): its next check-in may
queue as long on a busy server. Too short, and under load a fleet's devices lapse between check-ins faster
than a large cohort can form; a device that left meanwhile and is seated drops out of the cohort's first
phase, which closes without it."""
LAG_SMOOTHING = 0.05
_jitter = random.Random()  # spreads long-poll expiries; not security-relevant


class DevicePool:
    def __init__(self, store: Store, notifier: Notifier, fresh_s: float, clock: Clock | None = None) -> None:
        self.store = store
        self.clock: Clock = clock or SYSTEM_CLOCK  # availability deadlines and the arrival-to-written lag
        self.fresh_s = fresh_s
        self._waiters: dict[str, asyncio.Future[Assignment]] = {}
        self._task: asyncio.Task[None] | None = None
        self._available: Batcher[tuple[str, float], None] = Batcher(self._mark_available)
        self._presence: Batcher[str, tuple[str | None, dict[str, Any] | None]] = Batcher(self._read_presence)
        self.lag_s = 0.0
        """Smoothed time from a check-in's arrival to its availability being written."""
        notifier.subscribe(ASSIGN, self._on_assign)

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll(), name="pool-poll")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for fut in self._waiters.values():
            fut.cancel()

    def waiting(self) -> int:
        return len(self._waiters)

    async def checkin(self, device_id: str, wait_s: float, arrived: float | None = None) -> tuple[Assignment | None, bool]:
        """(the device's assignment or None, whether it long-polled for `wait_s`). `arrived`: `time.monotonic()`
        when the request reached the server (default: now)."""
        arrived = self.clock.monotonic() if arrived is None else arrived
        old = self._waiters.pop(device_id, None)
        if old is not None and not old.done():
            old.cancel()
        fut: asyncio.Future[Assignment] = asyncio.get_running_loop().create_future()
        self._waiters[device_id] = fut  # before reading: an assignment stored from now on wakes this future
        try:
            cohort_id, stored = await self._presence.submit(device_id)
            if stored is not None:
                return Assignment.model_validate(stored), False
            if cohort_id is None:
                until = self.clock.time() + max(wait_s, 0.0) + self.fresh_s + 2 * self.lag_s
                await self._available.submit((device_id, until))
                self.lag_s += LAG_SMOOTHING * (self.clock.monotonic() - arrived - self.lag_s)
            if wait_s <= 0:
                return None, False
            try:
                return await asyncio.wait_for(asyncio.shield(fut), wait_s * (0.5 + 0.5 * _jitter.random())), True
            except TimeoutError:
                return (fut.result() if fut.done() and not fut.cancelled() else None), True
        finally:
            if self._waiters.get(device_id) is fut:
                del self._waiters[device_id]

    async def _read_presence(self, device_ids: list[str]) -> list[tuple[str | None, dict[str, Any] | None]]:
        found = await self.store.presence(device_ids)
        return [found.get(d, (None, None)) for d in device_ids]

    async def _mark_available(self, rows: list[tuple[str, float]]) -> list[None]:
        await self.store.mark_available(rows)
        return [None] * len(rows)

    def deliver(self, assignments: dict[str, dict[str, Any]]) -> None:
        """Answer the long-polls this process holds for any of these devices."""
        for d, a in assignments.items():
            fut = self._waiters.get(d)
            if a is not None and fut is not None and not fut.done():  # None: a JSON null an older server stored
                fut.set_result(Assignment.model_validate(a))

    def _on_assign(self, cohort_id: str) -> None:
        if self._waiters:
            asyncio.ensure_future(self._deliver_cohort(cohort_id))

    async def _deliver_cohort(self, cohort_id: str) -> None:
        try:
            self.deliver(await self.store.assignments_of_cohort(cohort_id))
        except Exception as exc:  # the poll loop retries
            log.warning("reading the assignments of cohort %s failed: %s", cohort_id, exc)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            if not self._waiters:
                continue
            try:
                self.deliver(await self.store.assignments_for(list(self._waiters)))
            except Exception as exc:
                log.warning("polling assignments failed: %s", exc)
