"""Database side of running many server processes on one database (docs/scaling.md): the process registry and
the query leases.

- Process registry: each process inserts its row at startup and renews `heartbeat_at`; it is live while the
  heartbeat is younger than the lease TTL.
- Query leases: a query is run by the process named in `queries.lease_owner` until `lease_expires`. Leases
  are taken and renewed with conditional `UPDATE`s (`… WHERE lease_owner IS NULL OR lease_expires < now`), so
  two processes never both hold one; a process that lost its lease is fenced off by `lease_owner` checks in
  the transactions that store a cohort's result or close its masked-input phase (`cohort_store`).

Device presence and claims are in `presence_store`. All times are unix seconds from the injected clock; the
processes' clocks must agree to well within the lease TTL (NTP).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, or_, select, update

from analytics_server.db.base import Database, rowcount, run_to_completion
from analytics_server.db.models import Query, ServerProcess
from fa_common.clock import Clock

ACTIVE = ("pending", "running")
PROCESS_KEEP_S = 24 * 3600.0
"""Rows of processes whose last heartbeat is older than this are deleted."""


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
async def _direct_tx(db: Database) -> AsyncIterator[Any]:
    async with db.sessions() as s, s.begin():
        yield s


@run_to_completion
class Cluster:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    # -- processes ------------------------------------------------------------------------------

    async def register_process(self, pid_: str, name: str, url: str, host: str, pid: int) -> None:
        t = self.clock.time()
        async with self.db.tx() as s:
            s.add(ServerProcess(id=pid_, name=name, url=url, host=host, pid=pid, started_at=t, heartbeat_at=t,
                                stopped=False, load={}))

    def _lease_tx(self) -> Any:
        """The transaction for heartbeats and lease renewals. On PostgreSQL it does not queue behind this
        process's other writes (the in-process write lock serialises them for SQLite's sake): a busy process
        must still renew its leases in time, or it would hand its queries to another one while alive."""
        if self.db.dialect == "sqlite":
            return self.db.tx()
        return _direct_tx(self.db)

    async def heartbeat(self, process_id: str, load: dict[str, Any]) -> None:
        t = self.clock.time()
        async with self._lease_tx() as s:
            await s.execute(update(ServerProcess).where(ServerProcess.id == process_id).values(heartbeat_at=t, load=load))
            await s.execute(ServerProcess.__table__.delete().where(ServerProcess.heartbeat_at < t - PROCESS_KEEP_S))

    async def stop_process(self, process_id: str) -> None:
        """Graceful shutdown: give up every lease at once (another process resumes the queries without waiting
        for the TTL) and mark the process stopped."""
        async with self.db.tx() as s:
            await s.execute(
                update(Query).where(Query.lease_owner == process_id).values(lease_owner=None, lease_expires=None)
            )
            await s.execute(update(ServerProcess).where(ServerProcess.id == process_id).values(stopped=True))

    async def list_processes(self, ttl: float) -> list[ProcessView]:
        """Live processes first, then those that stopped or went silent within the last day."""
        now = self.clock.time()
        async with self.db.sessions() as s:
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
        async with self.db.sessions() as s:
            return (await s.execute(select(ServerProcess.url).where(ServerProcess.id == process_id))).scalar_one_or_none()

    # -- query leases ---------------------------------------------------------------------------

    async def acquire_query(self, query_id: str, owner: str, ttl: float, force: bool = False) -> bool:
        """Take the query's lease if it is free or lapsed (`force`: whoever holds it; the single-process SQLite
        server at startup). True when this process now holds it."""
        now = self.clock.time()
        cond = [Query.id == query_id, Query.status.in_(ACTIVE)]
        if not force:
            cond.append(or_(Query.lease_owner.is_(None), Query.lease_expires < now, Query.lease_owner == owner))
        async with self.db.tx() as s:
            res = await s.execute(update(Query).where(*cond).values(lease_owner=owner, lease_expires=now + ttl))
            return bool(rowcount(res))

    async def renew_leases(self, owner: str, ttl: float) -> set[str]:
        """Extend every lease this process holds on a live query; returns the ids still held. A lease that
        lapsed but that no other process took over (`lease_owner` is still this process) is still held: nobody
        else has run the query meanwhile, so this process keeps it instead of restarting its round."""
        now = self.clock.time()
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
        now = self.clock.time()
        async with self.db.sessions() as s:
            rows = await s.execute(
                select(Query.id)
                .where(Query.status.in_(ACTIVE), or_(Query.lease_owner.is_(None), Query.lease_expires < now))
                .order_by(Query.created_at)
            )
            return list(rows.scalars())

    async def store_progress(self, progress: dict[str, dict[str, Any]], owner: str) -> None:
        async with self.db.tx() as s:
            for qid, p in progress.items():
                await s.execute(update(Query).where(Query.id == qid, Query.lease_owner == owner).values(progress=p))

    async def count_active_queries(self) -> int:
        async with self.db.sessions() as s:
            return int((await s.execute(select(func.count()).select_from(Query).where(Query.status == "running"))).scalar_one())


__all__ = ["Cluster", "ProcessView"]
