"""Database side of a failed opening (docs/validation.md, "A failed opening"): record who contributed to the
refused sum, free the members that may contribute again (charging the query one more run of its (ε, δ) when
their data would otherwise enter more sums of the round than its charge covers), and name the devices the group
test (`analytics_server.blame.named`) points at — all in the transaction that aborts the cohort.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, select

from analytics_server import blame
from analytics_server.db.cluster_store import _release
from analytics_server.db.models import (
    Cohort,
    CohortMember,
    Event,
    FailedSum,
    PrivacyCharge,
    Query,
    QueryExclusion,
    utcnow,
)
from analytics_server.db.translog_store import LOG_LOCK, now_ms
from queries import dp
from secagg.phases import Phase
from translog import entries as te

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession


@dataclass(frozen=True)
class FailedOpening:
    """A cohort whose unmasked sum did not open its contributors' commitments."""

    round_index: int
    contributors: frozenset[str]
    """The devices whose masked inputs are in the refused sum (at least one of them cheated)."""
    reuse: bool
    """Whether the members may contribute again in the round: only for a noisy round (each sum the server sees is
    then differentially private and a second one costs one more run of the query; in a noise-free round a second
    exact sum over overlapping devices would let the server difference them)."""
    extra_runs: int
    """The most runs of the query's (ε, δ) beyond the first that failed openings may add to its charge."""
    quorum: int
    """`blame.named`'s quorum."""
    default_budget: dp.Budget


@dataclass
class FailedOpeningOutcome:
    freed: int = 0
    """Contributors free to join another cohort of the round."""
    kept: int = 0
    """Contributors that keep their seat (the round is noise-free, the charge could not grow, or they already
    contributed to as many sums of the round as the charge's runs allow)."""
    runs: int | None = None
    """Runs of the query's (ε, δ) charged after this failure (None: the query carries no charge)."""
    named: dict[str, list[str]] = field(default_factory=dict)
    """Devices newly left out of the query → the failed cohorts that name them."""
    why_kept: str | None = None


class BlameStore:
    """Mixin of `Store`: failed openings."""

    if TYPE_CHECKING:
        sessions: Any

        def _tx(self, locks: Sequence[str] = ...) -> Any: ...

        @staticmethod
        async def _ledger(s: AsyncSession, source: str, default: dp.Budget) -> tuple[
            dp.Budget, dp.PrivacyCost, int, bool]: ...

        async def _log_append(self, s: AsyncSession, entries: list[dict[str, Any]]) -> Any: ...

    async def abort_failed_opening(self, cohort_id: str, reason: str, failure: FailedOpening) -> FailedOpeningOutcome:
        """Abort the running cohort after its sum failed the opening check (see the module docstring)."""
        async with self.sessions() as s:
            row = (await s.execute(select(Query.id, Query.source).join(Cohort, Cohort.query_id == Query.id)
                                   .where(Cohort.id == cohort_id))).first()
        out = FailedOpeningOutcome()
        if row is None:
            return out
        query_id, source = row
        async with self._tx([f"source:{source}", LOG_LOCK]) as s:
            c = await s.get(Cohort, cohort_id)
            if c is None or c.status != "running":
                return out
            c.status, c.reason, c.finished_at, c.phase = "aborted", reason, utcnow(), int(Phase.UNMASKING)
            at = utcnow()
            s.add_all([FailedSum(cohort_id=cohort_id, device_id=d, query_id=query_id, round_index=failure.round_index,
                                 created_at=at) for d in sorted(failure.contributors)])
            await s.flush()
            members = set((await s.execute(select(CohortMember.device_id)
                                           .where(CohortMember.cohort_id == cohort_id))).scalars())
            freed = members - failure.contributors  # their data is in no sum: free at no cost
            again = await self._may_contribute_again(s, query_id, source, cohort_id, failure, out)
            freed |= again
            out.freed, out.kept = len(again), len(failure.contributors) - len(again)
            if freed:
                await s.execute(delete(CohortMember).where(CohortMember.cohort_id == cohort_id,
                                                           CohortMember.device_id.in_(sorted(freed))))
            await _release(s, cohort_id)
            groups = await self._failed_groups(s, query_id)
            already = set((await s.execute(select(QueryExclusion.device_id)
                                           .where(QueryExclusion.query_id == query_id))).scalars())
            for device, cohorts in blame.named(groups, failure.quorum).items():
                if device in already:
                    continue
                out.named[device] = cohorts
                s.add(QueryExclusion(query_id=query_id, device_id=device, created_at=at, reason=(
                    f"failed openings: contributed to {len(cohorts)} cohorts whose sums did not open their "
                    f"commitments and which share no other device ({', '.join(cohorts)})")))
            s.add(Event(query_id=query_id, cohort_id=cohort_id, type="cohort.aborted", created_at=at, data={
                "reason": reason, "phase": Phase.UNMASKING.label, "failed_opening": {
                    "contributors": len(failure.contributors), "freed": out.freed, "kept": out.kept,
                    "runs": out.runs, "named": sorted(out.named), "why_kept": out.why_kept}}))
        return out

    async def _may_contribute_again(self, s: AsyncSession, query_id: str, source: str, cohort_id: str,
                                    failure: FailedOpening, out: FailedOpeningOutcome) -> set[str]:
        """The contributors that may join another cohort of the round, charging one more run if they need it."""
        charge = (await s.execute(select(PrivacyCharge).where(PrivacyCharge.query_id == query_id,
                                                              PrivacyCharge.status == "charged"))).scalar_one_or_none()
        out.runs = None if charge is None else charge.runs
        if not failure.reuse:
            out.why_kept = "a noise-free round: a second exact sum over the same devices could be differenced"
            return set()
        if charge is None:
            out.why_kept = "the query carries no privacy charge to extend"
            return set()
        counts = dict((await s.execute(
            select(FailedSum.device_id, func.count()).where(
                FailedSum.query_id == query_id, FailedSum.round_index == failure.round_index,
                FailedSum.device_id.in_(sorted(failure.contributors)))
            .group_by(FailedSum.device_id))).all())
        # a device in k refused sums of the round may add one more sum if the charge covers k + 1 runs
        allowed = {d for d in failure.contributors if counts.get(d, 0) <= failure.extra_runs}
        if not allowed:
            out.why_kept = f"each already contributed to {failure.extra_runs + 1} sums of the round (the most allowed)"
            return set()
        runs = 1 + max(counts.get(d, 0) for d in allowed)
        if runs > charge.runs:
            per_run = dp.PrivacyCost(charge.epsilon / charge.runs, charge.delta / charge.runs)
            more = runs - charge.runs
            budget, spent, _, _ = await self._ledger(s, source, failure.default_budget)
            try:
                budget.check(spent, dp.PrivacyCost(per_run.epsilon * more, per_run.delta * more))
            except dp.BudgetExceeded as exc:
                out.why_kept = f"one more run of the query does not fit its source's budget: {exc}"
                return set()
            await self._log_append(s, [
                te.charge_entry(query_id, source, per_run.epsilon, per_run.delta, now_ms(), layer=k, cohort_id=cohort_id)
                for k in range(charge.runs + 1, runs + 1)])
            charge.epsilon += per_run.epsilon * more
            charge.delta += per_run.delta * more
            charge.runs = runs
            out.runs = runs
            s.add(Event(query_id=query_id, cohort_id=cohort_id, type="budget.charged", created_at=utcnow(),
                        data={"runs": runs, "epsilon": per_run.epsilon * more, "delta": per_run.delta * more,
                              "reason": "failed opening"}))
        return allowed

    @staticmethod
    async def _failed_groups(s: AsyncSession, query_id: str) -> dict[str, frozenset[str]]:
        groups: dict[str, set[str]] = {}
        for cohort, device in (await s.execute(select(FailedSum.cohort_id, FailedSum.device_id)
                                               .where(FailedSum.query_id == query_id))).all():
            groups.setdefault(cohort, set()).add(device)
        return {c: frozenset(d) for c, d in groups.items()}

    async def failed_summary(self, query_id: str) -> tuple[int, int | None]:
        """(cohorts of the query whose sums failed the opening check, runs of its (ε, δ) charged or None)."""
        async with self.sessions() as s:
            failed = (await s.execute(select(func.count(func.distinct(FailedSum.cohort_id)))
                                      .where(FailedSum.query_id == query_id))).scalar_one()
            runs = (await s.execute(select(PrivacyCharge.runs).where(PrivacyCharge.query_id == query_id,
                                                                     PrivacyCharge.status == "charged"))).scalar()
        return int(failed), runs

    async def failed_groups(self, query_id: str) -> dict[str, frozenset[str]]:
        """Failed cohort → its contributors, for the query's cohort formation (`blame.choose_members`)."""
        async with self.sessions() as s:
            return await self._failed_groups(s, query_id)


__all__ = ["BlameStore", "FailedOpening", "FailedOpeningOutcome"]
