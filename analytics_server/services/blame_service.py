"""A failed opening (docs/validation.md, "A failed opening") as one unit of work: record who contributed to the
refused sum, free the members that may contribute again (charging the query — and logging — one more run of its
(ε, δ) when their data would otherwise enter more sums of the round than its charge covers), and leave out the
devices the group test (`analytics_server.blame.named`) points at — all in the transaction that aborts the cohort.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession

from analytics_server import blame
from analytics_server.db.base import epoch_ms, shielded
from analytics_server.db.store import Store
from analytics_server.db.translog_store import LOG_LOCK
from queries.dp.errors import BudgetExceeded
from queries.dp.ledger import Budget, PrivacyCost
from secagg.phases import Phase
from translog import entries as te


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
    default_budget: Budget


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


@shielded
async def abort_failed_opening(store: Store, cohort_id: str, reason: str, failure: FailedOpening) -> FailedOpeningOutcome:
    """Abort the running cohort after its sum failed the opening check (see the module docstring)."""
    out = FailedOpeningOutcome()
    found = await store.cohorts.query_of(cohort_id)
    if found is None:
        return out
    query_id, source = found
    async with store.db.tx([f"source:{source}", LOG_LOCK]) as s:
        c = await store.cohorts.running_locked(s, cohort_id)
        if c is None:
            return out
        await store.blame.record(s, cohort_id, query_id, failure.round_index, failure.contributors)
        members = await store.cohorts.members_in(s, cohort_id)
        again = await _may_contribute_again(store, s, query_id, source, cohort_id, failure, out)
        freed = (members - failure.contributors) | again  # the others' data is in no sum: free at no cost
        out.freed, out.kept = len(again), len(failure.contributors) - len(again)
        groups = await store.blame.groups_in(s, query_id)
        already = await store.queries.excluded_in(s, query_id)
        for device, cohorts in blame.named(groups, failure.quorum).items():
            if device in already:
                continue
            out.named[device] = cohorts
            await store.queries.exclude_in(s, query_id, device, (
                f"failed openings: contributed to {len(cohorts)} cohorts whose sums did not open their "
                f"commitments and which share no other device ({', '.join(cohorts)})"))
        await store.cohorts.abort_in(s, c, reason, Phase.UNMASKING, freed, {"failed_opening": {
            "contributors": len(failure.contributors), "freed": out.freed, "kept": out.kept,
            "runs": out.runs, "named": sorted(out.named), "why_kept": out.why_kept}})
    return out


async def _may_contribute_again(store: Store, s: AsyncSession, query_id: str, source: str, cohort_id: str,
                                failure: FailedOpening, out: FailedOpeningOutcome) -> set[str]:
    """The contributors that may join another cohort of the round (`blame.reuse`), charging and logging one more
    run if they need it and it fits the source's budget."""
    charge = await store.budgets.charge_of(s, query_id)
    out.runs = None if charge is None else charge.runs
    refused = await store.blame.refused_in_round(s, query_id, failure.round_index, failure.contributors)
    decision = blame.reuse(failure.contributors, refused, failure.extra_runs, failure.reuse, out.runs)
    if decision.why_kept is not None:
        out.why_kept = decision.why_kept
        return set()
    assert charge is not None  # reuse allows nobody without a charge
    if decision.runs > charge.runs:
        per_run = PrivacyCost(charge.epsilon / charge.runs, charge.delta / charge.runs)
        more = decision.runs - charge.runs
        extra = PrivacyCost(per_run.epsilon * more, per_run.delta * more)
        ledger = await store.budgets.ledger(s, source, failure.default_budget)
        try:
            ledger.budget.check(ledger.spent, extra)
        except BudgetExceeded as exc:
            out.why_kept = f"one more run of the query does not fit its source's budget: {exc}"
            return set()
        at = epoch_ms(store.clock)
        await store.log.append(s, [
            te.charge_entry(query_id, source, per_run.epsilon, per_run.delta, at, layer=k, cohort_id=cohort_id)
            for k in range(charge.runs + 1, decision.runs + 1)])
        await store.budgets.extend(s, charge, decision.runs, per_run)
        out.runs = decision.runs
        await store.events.add(s, "budget.charged", {"runs": decision.runs, "epsilon": extra.epsilon,
                                                     "delta": extra.delta, "reason": "failed opening"},
                               query_id=query_id, cohort_id=cohort_id)
    return set(decision.allowed)


__all__ = ["FailedOpening", "FailedOpeningOutcome", "abort_failed_opening"]
