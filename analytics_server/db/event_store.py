"""The events table: what happened to queries and cohorts, in order (the analyst's event stream, the fleet report's
phase durations)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from analytics_server.db.base import Database, run_to_completion, utc
from analytics_server.db.models import Event
from fa_common.clock import Clock


@run_to_completion
class Events:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def add(self, s: AsyncSession, type: str, data: dict[str, Any], query_id: str | None = None,
                  cohort_id: str | None = None) -> None:
        """Record an event in the caller's transaction, stamped with the clock's time."""
        s.add(Event(query_id=query_id, cohort_id=cohort_id, type=type, data=data, created_at=utc(self.clock)))

    async def of_query(self, query_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        """The query's events with an id above `after`, oldest first."""
        async with self.db.sessions() as s:
            return list((await s.execute(
                select(Event).where(Event.query_id == query_id, Event.id > after).order_by(Event.id).limit(limit)
            )).scalars())


__all__ = ["Events"]
