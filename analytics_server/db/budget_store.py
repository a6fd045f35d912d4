"""The privacy-budget ledger's rows: each source's admin-set total and the charges of queries against it (charged,
extended by more runs, refunded), and the ledger as read for a check or a report.

Whether a charge fits, or is refunded, is decided by `queries.dp` rules called from `services`; these methods read
and write rows, in the caller's transaction where the decision and the write must be atomic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from analytics_server.db.base import Database, run_to_completion, utc
from analytics_server.db.models import Event, PrivacyBudget, PrivacyCharge
from fa_common.clock import Clock
from queries import dp


@dataclass(frozen=True)
class BudgetState:
    """A source's ledger: total (admin-set or the configured default), spent (basic composition of the
    charged queries), remaining."""

    source: str
    total_epsilon: float
    total_delta: float
    spent_epsilon: float
    spent_delta: float
    remaining_epsilon: float
    remaining_delta: float
    queries_charged: int
    configured: bool
    """True when an admin set this source's total; False when it is the server default."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Ledger:
    """A source's total and what its charges spent (basic composition), as read in one transaction."""

    budget: dp.Budget
    spent: dp.PrivacyCost
    charges: int
    configured: bool


@run_to_completion
class Budgets:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def ledger(self, s: AsyncSession, source: str, default: dp.Budget) -> Ledger:
        """The source's ledger, read in the caller's transaction (`default`: the total when no admin set one)."""
        row = await s.get(PrivacyBudget, source)
        budget = default if row is None else dp.Budget(row.total_epsilon, row.total_delta)
        charges = (await s.execute(
            select(PrivacyCharge.epsilon, PrivacyCharge.delta).where(
                PrivacyCharge.source == source, PrivacyCharge.status == "charged")
        )).all()
        return Ledger(budget, dp.compose_costs([(e, d) for e, d in charges]), len(charges), row is not None)

    async def get(self, source: str, default: dp.Budget) -> BudgetState:
        async with self.db.sessions() as s:
            led = await self.ledger(s, source, default)
        left = led.budget.remaining(led.spent)
        return BudgetState(source, led.budget.total_epsilon, led.budget.total_delta, led.spent.epsilon,
                           led.spent.delta, left.epsilon, left.delta, led.charges, led.configured)

    async def states(self, default: dp.Budget) -> list[BudgetState]:
        """Every source with an admin-set total or at least one charge, by name."""
        async with self.db.sessions() as s:
            names = set((await s.execute(select(PrivacyBudget.source))).scalars())
            names |= set((await s.execute(select(PrivacyCharge.source).distinct())).scalars())
        return [await self.get(name, default) for name in sorted(names)]

    async def set_total(self, s: AsyncSession, source: str, total_epsilon: float, total_delta: float) -> None:
        """Set a source's total (with its `budget.set` event) in the caller's transaction; it may be below what is
        already spent (then nothing more fits)."""
        at = utc(self.clock)
        row = await s.get(PrivacyBudget, source)
        if row is None:
            s.add(PrivacyBudget(source=source, total_epsilon=total_epsilon, total_delta=total_delta, updated_at=at))
        else:
            row.total_epsilon, row.total_delta, row.updated_at = total_epsilon, total_delta, at
        s.add(Event(type="budget.set", data={"source": source, "epsilon": total_epsilon, "delta": total_delta},
                    created_at=at))

    async def charge(self, s: AsyncSession, source: str, query_id: str, cost: dp.PrivacyCost) -> None:
        """Charge the query's cost to the source, in the caller's transaction."""
        s.add(PrivacyCharge(source=source, query_id=query_id, epsilon=cost.epsilon, delta=cost.delta,
                            status="charged", created_at=utc(self.clock)))

    async def charge_of(self, s: AsyncSession, query_id: str) -> PrivacyCharge | None:
        """The query's charge in force, read in the caller's transaction (None: none, or refunded)."""
        return (await s.execute(select(PrivacyCharge).where(
            PrivacyCharge.query_id == query_id, PrivacyCharge.status == "charged"))).scalar_one_or_none()

    async def charges_of(self, s: AsyncSession, query_id: str) -> list[PrivacyCharge]:
        """Every charge of the query still in force, read in the caller's transaction."""
        return list((await s.execute(select(PrivacyCharge).where(
            PrivacyCharge.query_id == query_id, PrivacyCharge.status == "charged"))).scalars())

    async def extend(self, s: AsyncSession, charge: PrivacyCharge, runs: int, per_run: dp.PrivacyCost) -> None:
        """Grow a charge to `runs` runs of `per_run`, in the caller's transaction."""
        more = runs - charge.runs
        charge.epsilon += per_run.epsilon * more
        charge.delta += per_run.delta * more
        charge.runs = runs

    async def refund(self, s: AsyncSession, query_id: str) -> None:
        """Mark the query's charges in force refunded, in the caller's transaction."""
        await s.execute(update(PrivacyCharge).where(PrivacyCharge.query_id == query_id, PrivacyCharge.status == "charged")
                        .values(status="refunded", refunded_at=utc(self.clock)))

    async def runs_of(self, s: AsyncSession, query_id: str) -> int | None:
        """Runs of the query's (ε, δ) its charge in force covers (None: no charge), read in the caller's
        transaction."""
        return (await s.execute(select(PrivacyCharge.runs).where(
            PrivacyCharge.query_id == query_id, PrivacyCharge.status == "charged"))).scalar()


__all__ = ["BudgetState", "Budgets", "Ledger"]
