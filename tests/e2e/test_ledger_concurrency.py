"""Privacy charges are safe across server processes: two independent `Store`s (two engines, as two server
processes would have) on one database charge concurrently, and neither a source's budget nor an analyst's ε
quota nor the active-query cap is overspent. An in-process lock alone would let both pass (each store has
its own); the charge runs under a database lock (BEGIN IMMEDIATE on SQLite, SELECT … FOR UPDATE on
PostgreSQL). Runs against PostgreSQL too when FA_TEST_POSTGRES_URL is set (`make test-postgres`)."""

from __future__ import annotations

import asyncio

import pytest

from analytics_server.db.engine import make_engine
from analytics_server.db.store import Store
from analytics_server.services import queries_service
from queries import dp
from queries.dp.limits import ActiveQueryLimit, AnalystLimits, AnalystQuotaExceeded

pytestmark = pytest.mark.e2e

BUDGET = dp.Budget(1.5, 1e-4)  # one ε = 1 query fits, a second does not
COST = dp.PrivacyCost(1.0, 1e-6)


async def _attempt(store: Store, source: str, created_by: int | None = None, limits: AnalystLimits | None = None,
                   cost: dp.PrivacyCost | None = COST) -> str | Exception:
    try:
        q = await queries_service.submit(store, "histogram", None, source, {}, {}, 1, None, created_by, cost=cost,
                                     default_budget=BUDGET, limits=limits)
    except (dp.BudgetExceeded, AnalystQuotaExceeded, ActiveQueryLimit) as exc:
        return exc
    return q.id


def test_two_stores_cannot_overspend_a_source(db_url: str) -> None:
    async def run() -> None:
        a, b = Store(make_engine(db_url)), Store(make_engine(db_url))
        try:
            for source in ("s1", "s2", "s3"):  # several rounds: each a fresh race between the two stores
                results = await asyncio.gather(*(_attempt(s, source) for s in (a, b) for _ in range(3)))
                ok = [r for r in results if isinstance(r, str)]
                assert len(ok) == 1, results
                assert all(isinstance(r, dp.BudgetExceeded) for r in results if not isinstance(r, str))
                state = await b.budgets.get(source, BUDGET)
                assert (state.spent_epsilon, state.queries_charged) == (1.0, 1)
        finally:
            await a.engine.dispose()
            await b.engine.dispose()

    asyncio.run(run())


def test_two_stores_cannot_overspend_an_analyst_quota_or_cap(db_url: str) -> None:
    async def run() -> None:
        a, b = Store(make_engine(db_url)), Store(make_engine(db_url))
        try:
            info = await a.tokens.lookup(await a.tokens.create("analyst"))
            assert info is not None
            tok = info.id
            # ε quota 1.5 across sources: the analyst's concurrent charges to six different sources (each with
            # room to spare) are serialised on the analyst's lock, and only one ε = 1 query fits
            quota = AnalystLimits(epsilon_quota=1.5)
            results = await asyncio.gather(*(_attempt(s, f"q{i}{j}", tok, quota) for i, s in enumerate((a, b)) for j in range(3)))
            ok = [r for r in results if isinstance(r, str)]
            assert len(ok) == 1, results
            assert all(isinstance(r, AnalystQuotaExceeded) for r in results if not isinstance(r, str))
            usage = await queries_service.usage(a, tok, quota)
            assert (usage.epsilon_used, usage.active_queries) == (1.0, 1)
            # at most two active queries (no noise, no charge): the one above plus one of these six
            cap = AnalystLimits(max_active=2)
            results = await asyncio.gather(*(_attempt(s, "free", tok, cap, None) for s in (a, b) for _ in range(3)))
            assert len([r for r in results if isinstance(r, str)]) == 1, results
            assert (await queries_service.usage(b, tok, cap)).active_queries == 2
        finally:
            await a.engine.dispose()
            await b.engine.dispose()

    asyncio.run(run())
