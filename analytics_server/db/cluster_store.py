"""Database side of running many server processes on one database (docs/scaling.md).

- Process registry: each process inserts its row at startup and renews `heartbeat_at`; it is live while the
  heartbeat is younger than the lease TTL.
- Query leases: a query is run by the process named in `queries.lease_owner` until `lease_expires`. Leases
  are taken and renewed with conditional `UPDATE`s (`… WHERE lease_owner IS NULL OR lease_expires < now`), so
  two processes never both hold one; a process that lost its lease is fenced off by `lease_owner` checks in
  the transactions that store a cohort's result or close its masked-input phase.
- Device presence: a check-in at any process marks the device available (and the process holding its long-poll
  withdraws it when that connection closes early); the process forming a cohort claims
  free devices with one conditional `UPDATE … RETURNING` (never seating a device twice) in the transaction that
  creates the cohort and stores their assignments (`Store.create_cohort(claim=True)`), so a claim never names a
  cohort that was not stored, whenever its process dies; `Store.release_abandoned` frees what a dead process (or
  an older server version, which claimed first) still left claimed.

All times are unix seconds from the processes' clocks, which must agree to well within the lease TTL (NTP).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from analytics_server.db.models import Cohort, DevicePresence, Query, ServerProcess

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

ACTIVE = ("pending", "running")
CHUNK = 500
"""Ids per `IN (…)` list (SQLite's bound-parameter limit)."""
PROCESS_KEEP_S = 24 * 3600.0
"""Rows of processes whose last heartbeat is older than this are deleted."""
FORMATION_STEPS = ("before_claims", "claimed", "logged", "cohort_row", "committed")
"""The steps of storing a forming cohort (`Store.create_cohort` with `claim`) at which `ClusterStore.fault_hook`
is called: before its transaction, after the claims, after the task's log entry, after the cohort's row, seats and
assignments (all three inside the transaction), and after the commit."""


class ClaimLost(Exception):
    """Some of a forming cohort's devices could not be claimed (another cohort took them first, or their
    availability lapsed). Nothing was written; `lost` names those devices."""

    def __init__(self, cohort_id: str, lost: Iterable[str]) -> None:
        self.lost = frozenset(lost)
        super().__init__(f"cohort {cohort_id}: {len(self.lost)} devices could not be claimed")


@dataclass(frozen=True)
class ProcessView:
    id: str
    name: str
    url: str
    host: str
    pid: int
    started_at: float
    heartbeat_at: float
    live: bool
    leases: list[str]
    load: dict[str, Any]


@asynccontextmanager
async def _direct_tx(sessions: Any) -> AsyncIterator[Any]:
    async with sessions() as s, s.begin():
        yield s


def _chunks(ids: Sequence[str]) -> Iterable[list[str]]:
    for i in range(0, len(ids), CHUNK):
        yield list(ids[i:i + CHUNK])


class ClusterStore:
    """Mixin of `Store` (which provides `engine`, `sessions` and `_tx`)."""

    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    fault_hook: Callable[[str], None] | None = None
    """Fault injection for tests: called with each step of a cohort's formation (`FORMATION_STEPS`); raising there
    stands for the process dying at that step (an open transaction rolls back, as the database does for a dead
    connection)."""

    def _tx(self, locks: Iterable[str] = ()) -> Any:  # pragma: no cover - provided by Store
        raise NotImplementedError

    def _fault(self, step: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(step)

    # -- processes ------------------------------------------------------------------------------

    async def register_process(self, pid_: str, name: str, url: str, host: str, pid: int) -> None:
        t = time.time()
        async with self._tx() as s:
            s.add(ServerProcess(id=pid_, name=name, url=url, host=host, pid=pid, started_at=t, heartbeat_at=t,
                                stopped=False, load={}))

    def _lease_tx(self) -> Any:
        """The transaction for heartbeats and lease renewals. On PostgreSQL it does not queue behind this
        process's other writes (the in-process write lock serialises them for SQLite's sake): a busy process
        must still renew its leases in time, or it would hand its queries to another one while alive."""
        if self.engine.dialect.name == "sqlite":
            return self._tx()
        return _direct_tx(self.sessions)

    async def heartbeat(self, process_id: str, load: dict[str, Any]) -> None:
        t = time.time()
        async with self._lease_tx() as s:
            await s.execute(update(ServerProcess).where(ServerProcess.id == process_id).values(heartbeat_at=t, load=load))
            await s.execute(ServerProcess.__table__.delete().where(ServerProcess.heartbeat_at < t - PROCESS_KEEP_S))

    async def stop_process(self, process_id: str) -> None:
        """Graceful shutdown: give up every lease at once (another process resumes the queries without waiting
        for the TTL) and mark the process stopped."""
        async with self._tx() as s:
            await s.execute(
                update(Query).where(Query.lease_owner == process_id).values(lease_owner=None, lease_expires=None)
            )
            await s.execute(update(ServerProcess).where(ServerProcess.id == process_id).values(stopped=True))

    async def list_processes(self, ttl: float) -> list[ProcessView]:
        """Live processes first, then those that stopped or went silent within the last day."""
        now = time.time()
        async with self.sessions() as s:
            procs = list((await s.execute(select(ServerProcess).order_by(ServerProcess.started_at))).scalars())
            leases = (
                await s.execute(
                    select(Query.lease_owner, Query.id).where(
                        Query.status.in_(ACTIVE), Query.lease_owner.is_not(None), Query.lease_expires > now
                    )
                )
            ).all()
        held: dict[str, list[str]] = {}
        for owner, qid in leases:
            assert owner is not None  # selected with lease_owner IS NOT NULL
            held.setdefault(owner, []).append(qid)
        views = [
            ProcessView(p.id, p.name, p.url, p.host, p.pid, p.started_at, p.heartbeat_at,
                        live=not p.stopped and p.heartbeat_at > now - ttl, leases=sorted(held.get(p.id, [])),
                        load=p.load or {})
            for p in procs
        ]
        return sorted(views, key=lambda v: (not v.live, v.started_at))

    async def process_url(self, process_id: str) -> str | None:
        async with self.sessions() as s:
            return (await s.execute(select(ServerProcess.url).where(ServerProcess.id == process_id))).scalar_one_or_none()

    # -- query leases ---------------------------------------------------------------------------

    async def acquire_query(self, query_id: str, owner: str, ttl: float, force: bool = False) -> bool:
        """Take the query's lease if it is free or lapsed (`force`: whoever holds it; the single-process SQLite
        server at startup). True when this process now holds it."""
        now = time.time()
        cond = [Query.id == query_id, Query.status.in_(ACTIVE)]
        if not force:
            cond.append(or_(Query.lease_owner.is_(None), Query.lease_expires < now, Query.lease_owner == owner))
        async with self._tx() as s:
            res = await s.execute(update(Query).where(*cond).values(lease_owner=owner, lease_expires=now + ttl))
            return bool(res.rowcount)

    async def renew_leases(self, owner: str, ttl: float) -> set[str]:
        """Extend every lease this process holds on a live query; returns the ids still held. A lease that
        lapsed but that no other process took over (`lease_owner` is still this process) is still held: nobody
        else has run the query meanwhile, so this process keeps it instead of restarting its round."""
        now = time.time()
        async with self._lease_tx() as s:
            rows = await s.execute(
                update(Query)
                .where(Query.lease_owner == owner, Query.status.in_(ACTIVE))
                .values(lease_expires=now + ttl)
                .returning(Query.id)
            )
            return set(rows.scalars())

    async def unleased_queries(self) -> list[str]:
        """Active queries no live process holds (never leased, released, or their owner went silent)."""
        now = time.time()
        async with self.sessions() as s:
            rows = await s.execute(
                select(Query.id)
                .where(Query.status.in_(ACTIVE), or_(Query.lease_owner.is_(None), Query.lease_expires < now))
                .order_by(Query.created_at)
            )
            return list(rows.scalars())

    async def store_progress(self, progress: dict[str, dict[str, Any]], owner: str) -> None:
        async with self._tx() as s:
            for qid, p in progress.items():
                await s.execute(update(Query).where(Query.id == qid, Query.lease_owner == owner).values(progress=p))

    async def count_active_queries(self) -> int:
        async with self.sessions() as s:
            return int((await s.execute(select(func.count()).select_from(Query).where(Query.status == "running"))).scalar_one())

    # -- device presence ------------------------------------------------------------------------

    def _upsert(self) -> Any:
        return pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert

    async def mark_available(self, rows: Sequence[tuple[str, float]]) -> None:
        """These devices checked in and may be seated until their `until` (a claim in progress is kept).
        One transaction for all of them; a device listed twice keeps its latest `until`."""
        latest: dict[str, float] = {}
        for device_id, until in rows:
            latest[device_id] = max(until, latest.get(device_id, until))
        ids = list(latest)
        async with self._tx() as s:
            for chunk in _chunks(ids):
                ins = self._upsert()(DevicePresence).values(
                    [{"device_id": d, "available_until": latest[d], "cohort_id": None} for d in chunk])
                ins = ins.on_conflict_do_update(index_elements=["device_id"],
                                                set_={"available_until": ins.excluded.available_until})
                await s.execute(ins)

    async def withdraw_available(self, rows: Sequence[tuple[str, float]]) -> None:
        """These devices' check-in long-polls closed early (the client went away): each is no longer available,
        provided its availability is still the `until` that long-poll wrote — a later check-in (at this or any
        other process) has written another and keeps it. One statement for all of them (executemany)."""
        if not rows:
            return
        presence = DevicePresence.__table__
        async with self._tx() as s:
            await s.execute(
                update(presence)
                .where(presence.c.device_id == bindparam("b_device"), presence.c.available_until == bindparam("b_until"))
                .values(available_until=0.0),
                [{"b_device": d, "b_until": until} for d, until in rows],
            )

    async def presence(self, device_ids: Sequence[str]) -> dict[str, tuple[str | None, dict[str, Any] | None]]:
        """Per device with a presence row: (cohort it is claimed for, its assignment once stored)."""
        out: dict[str, tuple[str | None, dict[str, Any] | None]] = {}
        async with self.sessions() as s:
            for chunk in _chunks(list(dict.fromkeys(device_ids))):
                rows = await s.execute(
                    select(DevicePresence.device_id, DevicePresence.cohort_id, DevicePresence.assignment)
                    .where(DevicePresence.device_id.in_(chunk))
                )
                out.update({d: (c, a) for d, c, a in rows.all()})
        return out

    async def count_available(self) -> int:
        """How many devices are available and free (cheaper than listing them: no rows leave the database)."""
        now = time.time()
        async with self.sessions() as s:
            return int((await s.execute(
                select(func.count()).select_from(DevicePresence)
                .where(DevicePresence.available_until > now, DevicePresence.cohort_id.is_(None))
            )).scalar_one())

    async def available_devices(self) -> list[str]:
        now = time.time()
        async with self.sessions() as s:
            rows = await s.execute(
                select(DevicePresence.device_id).where(DevicePresence.available_until > now, DevicePresence.cohort_id.is_(None))
            )
            return list(rows.scalars())

    async def claim_devices(self, cohort_id: str, device_ids: Sequence[str]) -> list[str]:
        """Seat-claim on its own: the subset of `device_ids` still available and free, now marked with `cohort_id`
        (conditional UPDATE … RETURNING: two processes never claim one device). It names no stored cohort: the
        orchestrator claims in the transaction that stores the cohort (`Store.create_cohort(claim=True)`), and
        `Store.release_abandoned` frees claims like these."""
        async with self._tx() as s:
            claimed = await _claim(s, cohort_id, device_ids)
        order = {d: i for i, d in enumerate(device_ids)}
        return sorted(claimed, key=order.__getitem__)

    async def release_devices(self, cohort_id: str, device_ids: Sequence[str] | None = None) -> None:
        """Free devices claimed by `cohort_id` (all of them, or those listed: dropped from it). A freed device
        is not offered again until it checks in again."""
        async with self._tx() as s:
            await _release(s, cohort_id, device_ids)

    async def assignments_of_cohort(self, cohort_id: str) -> dict[str, dict[str, Any]]:
        async with self.sessions() as s:
            rows = await s.execute(
                select(DevicePresence.device_id, DevicePresence.assignment)
                .where(DevicePresence.cohort_id == cohort_id, DevicePresence.assignment.is_not(None))
            )
            return {d: a for d, a in rows.all()}

    async def assignments_for(self, device_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        async with self.sessions() as s:
            for chunk in _chunks(device_ids):
                rows = await s.execute(
                    select(DevicePresence.device_id, DevicePresence.assignment)
                    .where(DevicePresence.device_id.in_(chunk), DevicePresence.cohort_id.is_not(None),
                           DevicePresence.assignment.is_not(None))
                )
                out.update({d: a for d, a in rows.all()})
        return out

    async def cohort_route(self, cohort_id: str) -> tuple[str, str | None] | None:
        """(status, URL of the owning process) of a stored cohort; None if there is no such cohort."""
        async with self.sessions() as s:
            row = (await s.execute(select(Cohort.status, Cohort.owner).where(Cohort.id == cohort_id))).first()
        if row is None:
            return None
        status, owner = row
        return status, (await self.process_url(owner) if owner else None)


async def _claim(s: AsyncSession, cohort_id: str, device_ids: Sequence[str]) -> list[str]:
    """Mark those of `device_ids` that are available and free as claimed by `cohort_id`; the ones claimed."""
    now = time.time()
    claimed: list[str] = []
    for chunk in _chunks(device_ids):
        rows = await s.execute(
            update(DevicePresence)
            .where(DevicePresence.device_id.in_(chunk), DevicePresence.cohort_id.is_(None),
                   DevicePresence.available_until > now)
            .values(cohort_id=cohort_id, assignment=None)
            .returning(DevicePresence.device_id)
        )
        claimed += list(rows.scalars())
    return claimed


async def _release(s: AsyncSession, cohort_id: str, device_ids: Sequence[str] | None = None) -> None:
    cond = [DevicePresence.cohort_id == cohort_id]
    if device_ids is None:
        await s.execute(update(DevicePresence).where(*cond).values(cohort_id=None, assignment=None, available_until=0.0))
        return
    for chunk in _chunks(list(device_ids)):
        await s.execute(
            update(DevicePresence).where(and_(*cond, DevicePresence.device_id.in_(chunk)))
            .values(cohort_id=None, assignment=None, available_until=0.0)
        )


__all__ = ["FORMATION_STEPS", "ClaimLost", "ClusterStore", "ProcessView", "_claim", "_release"]
