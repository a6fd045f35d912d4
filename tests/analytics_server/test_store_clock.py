"""The store reads the time only from its injected clock: stored timestamps, availability, leases, the quota window
and the transparency log's entries all follow a `ManualClock`, never the machine's clock."""

from __future__ import annotations

from datetime import datetime, timezone

from analytics_server.db.engine import make_engine
from analytics_server.db.store import Store
from analytics_server.services import budgets_service, queries_service
from fa_common.clock import ManualClock
from queries import dp

START = 1_000_000_000.0
"""2001: far from the machine's clock, so a timestamp read from it would show."""


async def test_every_timestamp_and_deadline_comes_from_the_injected_clock(migrated_url: str) -> None:
    clock = ManualClock(START)
    store = Store(make_engine(migrated_url), clock)
    await store.log.setup(b"k" * 32, "test")
    at = datetime.fromtimestamp(START, timezone.utc)

    token = await store.tokens.create("analyst")
    info = await store.tokens.lookup(token)
    assert info is not None
    assert [r.created_at.replace(tzinfo=timezone.utc) for r in await store.tokens.all_rows()] == [at]

    cost = dp.PrivacyCost(0.5, 1e-6)
    limits = dp.AnalystLimits(epsilon_quota=0.8, window_s=60)
    q = await queries_service.submit(store, "histogram", None, "w", {}, {}, 1, None, info.id, cost=cost,
                                     default_budget=dp.Budget(5.0, 1e-5), limits=limits)
    assert q.created_at == at
    assert (await queries_service.usage(store, info.id, limits)).epsilon_used == 0.5
    clock.advance(61)  # the charge leaves the quota's window on the injected clock, not the machine's
    assert (await queries_service.usage(store, info.id, limits)).epsilon_used == 0.0
    await budgets_service.set_budget(store, "w", 2.0, 1e-5)
    _, entries = await store.log.entries(0, 10)
    assert [(e["type"], e["at"]) for _, e in entries] == [
        ("query", int(START * 1000)), ("charge", int(START * 1000)), ("budget", int((START + 61) * 1000))]

    await store.presence.mark_available([("d1", START + 100)])
    assert await store.presence.available() == ["d1"] and await store.presence.count_available() == 1
    clock.advance(100)
    assert await store.presence.available() == []

    await store.cluster.register_process("A", "a", "http://a", "h", 1)
    assert await store.cluster.acquire_query(q.id, "A", ttl=30)
    assert await store.cluster.unleased_queries() == []
    clock.advance(31)
    assert await store.cluster.unleased_queries() == [q.id]
    (view,) = await store.cluster.list_processes(ttl=30)
    assert view.started_at == START + 161 and not view.live
    await store.engine.dispose()
