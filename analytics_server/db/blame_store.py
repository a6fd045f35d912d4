"""Rows of failed openings (docs/validation.md, "A failed opening"): who contributed to each refused sum, read back
as the failed cohorts' groups (`analytics_server.blame`) and as per-device counts within a round.

What a failed opening does (which members are freed, whether the charge grows, who is named) is decided by
`services.blame_service`, in the transaction that aborts the cohort.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from analytics_server.db.base import Database, run_to_completion, utc
from analytics_server.db.budget_store import Budgets
from analytics_server.db.models import FailedSum
from fa_common.clock import Clock


@run_to_completion
class Blame:
    def __init__(self, db: Database, clock: Clock, budgets: Budgets) -> None:
        self.db = db
        self.clock = clock
        self.budgets = budgets

    async def record(self, s: AsyncSession, cohort_id: str, query_id: str, round_index: int,
                     contributors: Iterable[str]) -> None:
        """Record the devices whose masked inputs are in the cohort's refused sum, in the caller's transaction."""
        at = utc(self.clock)
        s.add_all([FailedSum(cohort_id=cohort_id, device_id=d, query_id=query_id, round_index=round_index,
                             created_at=at) for d in sorted(contributors)])
        await s.flush()

    async def refused_in_round(self, s: AsyncSession, query_id: str, round_index: int,
                               devices: Iterable[str]) -> dict[str, int]:
        """Device → refused sums of the round it contributed to (of `devices`), read in the caller's transaction."""
        rows = (await s.execute(
            select(FailedSum.device_id, func.count()).where(
                FailedSum.query_id == query_id, FailedSum.round_index == round_index,
                FailedSum.device_id.in_(sorted(devices)))
            .group_by(FailedSum.device_id))).all()
        return {d: int(n) for d, n in rows}

    async def groups_in(self, s: AsyncSession, query_id: str) -> dict[str, frozenset[str]]:
        """Failed cohort → its contributors, read in the caller's transaction."""
        groups: dict[str, set[str]] = {}
        for cohort, device in (await s.execute(select(FailedSum.cohort_id, FailedSum.device_id)
                                               .where(FailedSum.query_id == query_id))).all():
            groups.setdefault(cohort, set()).add(device)
        return {c: frozenset(d) for c, d in groups.items()}

    async def failed_groups(self, query_id: str) -> dict[str, frozenset[str]]:
        """Failed cohort → its contributors, for the query's cohort formation (`blame.candidates`)."""
        async with self.db.sessions() as s:
            return await self.groups_in(s, query_id)

    async def failed_summary(self, query_id: str) -> tuple[int, int | None]:
        """(cohorts of the query whose sums failed the opening check, runs of its (ε, δ) charged or None)."""
        async with self.db.sessions() as s:
            failed = (await s.execute(select(func.count(func.distinct(FailedSum.cohort_id)))
                                      .where(FailedSum.query_id == query_id))).scalar_one()
            runs = await self.budgets.runs_of(s, query_id)
        return int(failed), runs


__all__ = ["Blame"]
