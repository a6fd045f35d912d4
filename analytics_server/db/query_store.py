"""Query rows: inserted, read, moved between statuses, their release stored; and the devices left out of a query.

Each status change writes the query's row and its event; what a status change means for the query's privacy
charge and the transparency log is decided by `services.queries_service`, in the same transaction.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from analytics_server.db.base import Database, rowcount, run_to_completion, utc
from analytics_server.db.models import Event, Query, QueryExclusion
from fa_common.clock import Clock

TERMINAL = ("succeeded", "failed", "cancelled")
ACTIVE = ("pending", "running")


class QueryNotLive(RuntimeError):
    """A cohort tried to store its sum for a query that is already terminal (cancelled, failed)."""


@run_to_completion
class Queries:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def insert(self, s: AsyncSession, kind: str, name: str | None, source: str, spec: dict[str, Any],
                     state: dict[str, Any], rounds_upper_bound: int, calibration: dict[str, Any] | None,
                     created_by: int | None) -> Query:
        """A new pending query, in the caller's transaction (flushed: its id may be referenced)."""
        at = utc(self.clock)
        q = Query(id=secrets.token_hex(8), kind=kind, name=name, source=source, spec=spec, calibration=calibration,
                  status="pending", state=state, current_round=0, rounds_upper_bound=rounds_upper_bound,
                  created_by=created_by, created_at=at, updated_at=at)
        s.add(q)
        await s.flush()
        return q

    async def get(self, query_id: str) -> Query | None:
        async with self.db.sessions() as s:
            return await s.get(Query, query_id)

    async def newest(self, limit: int = 200, created_by: int | None = None) -> list[Query]:
        """Newest first; with `created_by`, only the queries that token submitted."""
        stmt = select(Query).order_by(Query.created_at.desc()).limit(limit)
        if created_by is not None:
            stmt = stmt.where(Query.created_by == created_by)
        async with self.db.sessions() as s:
            return list((await s.execute(stmt)).scalars())

    async def with_status(self, statuses: Iterable[str]) -> list[Query]:
        async with self.db.sessions() as s:
            return list((await s.execute(select(Query).where(Query.status.in_(list(statuses))))).scalars())

    async def count_by_status(self) -> dict[str, int]:
        async with self.db.sessions() as s:
            rows = (await s.execute(select(Query.status, func.count()).group_by(Query.status))).all()
        return {status: n for status, n in rows}

    async def set_status(self, s: AsyncSession, query_id: str, status: str, error: str | None = None) -> bool:
        """Move a non-terminal query to `status` (with its event), in the caller's transaction; False when it was
        already terminal."""
        at = utc(self.clock)
        values: dict[str, Any] = {"status": status, "updated_at": at}
        if error is not None:
            values["error"] = error
        if status in TERMINAL:
            values["finished_at"] = at
        res = await s.execute(update(Query).where(Query.id == query_id, Query.status.not_in(TERMINAL)).values(**values))
        if not rowcount(res):
            return False
        s.add(Event(query_id=query_id, type=f"query.{status}", data={"error": error}, created_at=at))
        return True

    async def store_release(self, s: AsyncSession, query_id: str, status: str, result: dict[str, Any],
                            privacy: dict[str, Any], uncertainty: dict[str, Any] | None,
                            warnings: list[dict[str, Any]] | None, failure: str | None) -> bool:
        """Store a running query's release and end it with `status` (with its event), in the caller's
        transaction; False when the query was not running."""
        at = utc(self.clock)
        res = await s.execute(
            update(Query).where(Query.id == query_id, Query.status == "running")
            .values(status=status, result=result, privacy=privacy, uncertainty=uncertainty, warnings=warnings,
                    error=failure, updated_at=at, finished_at=at)
        )
        if not rowcount(res):
            return False
        s.add(Event(query_id=query_id, type=f"query.{status}", data={"error": failure} if failure else {}, created_at=at))
        return True

    async def live_locked(self, s: AsyncSession, query_id: str, owner: str | None) -> None:
        """Lock the query's row (PostgreSQL) and raise QueryNotLive unless it is live and, with `owner`, leased by
        that process."""
        row = (
            await s.execute(select(Query.status, Query.lease_owner).where(Query.id == query_id).with_for_update())
        ).first()
        if row is None or row[0] in TERMINAL:
            raise QueryNotLive(f"query {query_id} is {row[0] if row else 'gone'}; the cohort's sum is not stored")
        if owner is not None and row[1] != owner:
            raise QueryNotLive(f"query {query_id} is now run by another server process (lease lost)")

    # -- exclusions -----------------------------------------------------------------------------

    async def exclude_device(self, query_id: str, device_id: str, reason: str) -> None:
        """Leave `device_id` out of every later cohort of the query (kept once: a second reason is not stored)."""
        stmt = self.db.upsert()(QueryExclusion.__table__).values(
            query_id=query_id, device_id=device_id, reason=reason[:2000], created_at=utc(self.clock)
        ).on_conflict_do_nothing()
        async with self.db.tx() as s:
            await s.execute(stmt)

    async def excluded_devices(self, query_id: str) -> dict[str, str]:
        """The devices excluded from the query, with why."""
        async with self.db.sessions() as s:
            return await self.excluded_in(s, query_id)

    async def excluded_in(self, s: AsyncSession, query_id: str) -> dict[str, str]:
        """`excluded_devices` in the caller's transaction."""
        rows = (await s.execute(select(QueryExclusion.device_id, QueryExclusion.reason)
                                .where(QueryExclusion.query_id == query_id))).all()
        return {d: r for d, r in rows}

    async def exclude_in(self, s: AsyncSession, query_id: str, device_id: str, reason: str) -> None:
        """Leave `device_id` out of the query, in the caller's transaction (the caller checked it was not yet)."""
        s.add(QueryExclusion(query_id=query_id, device_id=device_id, created_at=utc(self.clock), reason=reason))


__all__ = ["ACTIVE", "TERMINAL", "Queries", "QueryNotLive"]
