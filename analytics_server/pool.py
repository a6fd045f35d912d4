"""Devices' availability and the hand-over of assignments to them, shared by every server process.

A device is seatable while its check-in long-poll is open, and for a short gap after it returns. A check-in (at
any process) marks the device available in the database until the end of its long-poll plus `fresh_s` plus twice
the current check-in lag (check-ins arriving together are read and written in one statement each: `Batcher`): the
gap covers the device's way back for its next check-in. When the long-poll's connection closes before then (the
client went away), the process holding it withdraws the device at once: every `LIVENESS_CHECK_S` it looks for
long-polls whose connection closed, answers them, and sets their devices' availability to 0 in one statement
(`Store.withdraw_available`), only where it is still the `until` that long-poll wrote — a newer check-in, at this
or another process, keeps its own.
The process forming a cohort claims free devices there and stores their assignments with the cohort, in one
transaction (`cohorts_service.create_cohort(claim=True)`: all its members or none), then publishes the cohort id (`notify.ASSIGN`); the process
holding a member's long-poll reads the assignment and answers. A notification that is lost is made up by
polling the database for this process's waiters every `POLL_S`. A device claimed by a cohort is re-sent its
assignment when it checks in again, until the cohort ends or drops it (`Store.release_devices`).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from analytics_server.db.batching import Batcher
from analytics_server.db.store import Store
from analytics_server.notify import ASSIGN, Notifier
from fa_common.clock import SYSTEM_CLOCK, Clock
from queries.envelope import Assignment

log = logging.getLogger(__name__)
POLL_S = 1.0
AVAILABILITY_SLACK_S = 5.0
"""How long past its long-poll (and the Retry-After it was told) a device still counts as available, on top
of twice the time check-ins currently take to reach the database (`DevicePool.lag_s`): its next check-in may
queue as long on a busy server. Too short, and under load a fleet's devices lapse between check-ins faster
than a large cohort can form; a device that left meanwhile and is seated drops out of the cohort's first
phase, which closes without it. (One that leaves mid long-poll is withdrawn at once: `LIVENESS_CHECK_S`.) Kept
with the Retry-After for the gap after a full long-poll too, where devices are told to come straight back:
measured in process (300 SDK devices, 5 s long-polls), their next check-in's availability was written a median
0.09 s, at most 2.2 s, after the long-poll ended."""
LAG_SMOOTHING = 0.05
LIVENESS_CHECK_S = 0.2
"""How often a process looks for long-polls whose client closed the connection (aiohttp does not cancel the
handler: the pool asks each open long-poll's `gone()`, a check of its transport, once per interval — measured
~0.36 ms per 1,000 open long-polls, so ~0.2 % of a core per 1,000)."""
_jitter = random.Random()  # spreads long-poll expiries; not security-relevant


class DevicePool:
    def __init__(self, store: Store, notifier: Notifier, fresh_s: float, clock: Clock | None = None) -> None:
        self.store = store
        self.clock: Clock = clock or SYSTEM_CLOCK  # availability deadlines and the arrival-to-written lag
        self.fresh_s = fresh_s
        self._waiters: dict[str, asyncio.Future[Assignment]] = {}
        self._watched: dict[asyncio.Future[Assignment], tuple[Callable[[], bool], asyncio.Future[None]]] = {}
        """Per open long-poll (its waiter): whether its client has gone, and the future set when it is seen gone."""
        self._task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._available: Batcher[tuple[str, float], None] = Batcher(self._mark_available)
        self._withdrawn: Batcher[tuple[str, float], None] = Batcher(self._withdraw_available)
        self._background: set[asyncio.Future[None]] = set()
        self.withdrawn = 0
        """Long-polls this process ended because their connection closed, withdrawing their devices' availability
        (unless a newer check-in had already replaced it)."""
        self._draining: asyncio.Future[None] | None = None
        """Set at shutdown (`drain`): every open long-poll ends at once and new ones do not wait."""
        self._presence: Batcher[str, tuple[str | None, dict[str, Any] | None]] = Batcher(self._read_presence)
        self.lag_s = 0.0
        """Smoothed time from a check-in's arrival to its availability being written."""
        notifier.subscribe(ASSIGN, self._on_assign)

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll(), name="pool-poll")
        self._watch_task = asyncio.create_task(self._watch(), name="pool-liveness")

    async def stop(self) -> None:
        for task in (self._task, self._watch_task):
            if task is not None:
                task.cancel()
        for fut in self._waiters.values():
            fut.cancel()

    def drain(self) -> None:
        """Shutdown, before aiohttp waits for the handlers: end every open long-poll now (each answers "nothing
        yet"), so none is still running when the handlers are cancelled (aiohttp 3.14 can then log an
        InvalidStateError traceback from its own shutdown)."""
        draining = self._drain_future()
        if not draining.done():
            draining.set_result(None)

    def _drain_future(self) -> asyncio.Future[None]:
        if self._draining is None:
            self._draining = asyncio.get_running_loop().create_future()
        return self._draining

    def waiting(self) -> int:
        return len(self._waiters)

    async def checkin(self, device_id: str, wait_s: float, arrived: float | None = None,
                      gone: Callable[[], bool] | None = None) -> tuple[Assignment | None, bool]:
        """(the device's assignment or None, whether it long-polled to the end). `arrived`: `time.monotonic()`
        when the request reached the server (default: now). `gone()`: whether the client closed the connection;
        once it has, the long-poll ends with (None, False) and the availability it wrote is withdrawn."""
        arrived = self.clock.monotonic() if arrived is None else arrived
        old = self._waiters.pop(device_id, None)
        if old is not None and not old.done():
            old.cancel()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Assignment] = loop.create_future()
        self._waiters[device_id] = fut  # before reading: an assignment stored from now on wakes this future
        left: asyncio.Future[None] = loop.create_future()
        if gone is not None and wait_s > 0:
            self._watched[fut] = (gone, left)
        until: float | None = None
        marking = False
        try:
            cohort_id, stored = await self._presence.submit(device_id)
            if stored is not None:
                return Assignment.model_validate(stored), False
            wait = max(wait_s, 0.0) * (0.5 + 0.5 * _jitter.random())
            if cohort_id is None:
                until = self.clock.time() + wait + self.fresh_s + 2 * self.lag_s
                marking = True
                await self._available.submit((device_id, until))
                marking = False
                self.lag_s += LAG_SMOOTHING * (self.clock.monotonic() - arrived - self.lag_s)
            draining = self._drain_future()
            if wait_s <= 0 or draining.done():
                return None, False
            if not left.done() and gone is not None and gone():
                left.set_result(None)
            if not left.done():
                await asyncio.wait((fut, left, draining), timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if fut.cancelled():  # a newer check-in of this device replaced this long-poll
                raise asyncio.CancelledError
            if fut.done():
                return fut.result(), True
            if left.done() or draining.done():  # gone, or this process is stopping: not seatable here any more
                if until is not None:
                    await self._withdraw(device_id, until)
                return None, False
            return None, True
        except asyncio.CancelledError:
            if until is not None and gone is not None and gone():  # a server with handler cancellation on (aiohttp's
                self._withdraw_later(device_id, until, marking)  # test server) cancels the handler as its client leaves
            raise
        finally:
            self._watched.pop(fut, None)
            if self._waiters.get(device_id) is fut:
                del self._waiters[device_id]

    def _withdraw_later(self, device_id: str, until: float, marking: bool) -> None:
        """Withdraw from a cancelled check-in (it cannot await): after its own availability is written, when it
        was cancelled while that was under way (the batch writes it regardless)."""
        async def withdraw() -> None:
            if marking:
                await self._available.wait_idle()
            await self._withdraw(device_id, until)

        task = asyncio.ensure_future(withdraw())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _read_presence(self, device_ids: list[str]) -> list[tuple[str | None, dict[str, Any] | None]]:
        found = await self.store.presence.of(device_ids)
        return [found.get(d, (None, None)) for d in device_ids]

    async def _mark_available(self, rows: list[tuple[str, float]]) -> list[None]:
        await self.store.presence.mark_available(rows)
        return [None] * len(rows)

    async def _withdraw(self, device_id: str, until: float) -> None:
        try:
            await self._withdrawn.submit((device_id, until))
        except Exception as exc:  # the device stays available until `until`, as it would without the withdrawal
            log.warning("withdrawing device %s, whose long-poll closed, failed: %s", device_id[:8], exc)

    async def _withdraw_available(self, rows: list[tuple[str, float]]) -> list[None]:
        await self.store.presence.withdraw_available(rows)
        self.withdrawn += len(rows)
        return [None] * len(rows)

    def check_liveness(self) -> int:
        """End the open long-polls whose client has gone (each then withdraws its device); how many."""
        ended = 0
        for gone, left in list(self._watched.values()):
            if not left.done() and gone():
                left.set_result(None)
                ended += 1
        return ended

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
            self.deliver(await self.store.presence.assignments_of_cohort(cohort_id))
        except Exception as exc:  # the poll loop retries
            log.warning("reading the assignments of cohort %s failed: %s", cohort_id, exc)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(LIVENESS_CHECK_S)
            try:
                self.check_liveness()
            except Exception as exc:  # a gone() that failed: look again next time
                log.warning("checking long-polls' connections failed: %s", exc)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            if not self._waiters:
                continue
            try:
                self.deliver(await self.store.presence.assignments_for(list(self._waiters)))
            except Exception as exc:
                log.warning("polling assignments failed: %s", exc)
