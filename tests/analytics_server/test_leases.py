"""Query leases, fencing and device claims (analytics_server.db.cluster_store), with two "processes" as two
stores on one database: at most one lease holder, takeover after expiry, a lapsed holder cannot store a sum
or close a masked-input phase, a device is never seated twice, and a cancel's refund decision is ordered
against a closing masked-input phase."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from sqlalchemy import update

from analytics_server.db.engine import make_engine
from analytics_server.db.models import Query
from analytics_server.db.store import QueryNotLive, Store
from analytics_server.services import cohorts_service, queries_service


async def _two(url: str) -> tuple[Store, Store, str, int]:
    a, b = Store(make_engine(url)), Store(make_engine(url))
    q = await queries_service.submit(a, "histogram", None, "words", {}, {}, 1, None, None)
    r = await a.rounds.create(q.id, 0, {}, None, 20, need=1, dim=3)
    for d in ("d1", "d2", "d3"):
        await a.devices.register(d, d.encode().ljust(32, b"\0"))
    await a.cluster.register_process("A", "a", "http://a", "h", 1)
    await b.cluster.register_process("B", "b", "http://b", "h", 2)
    return a, b, q.id, r.id


async def _expire(store: Store, query_id: str) -> None:
    async with store.sessions() as s:
        await s.execute(update(Query).where(Query.id == query_id).values(lease_expires=time.time() - 1))
        await s.commit()


async def test_one_holder_takeover_after_expiry_and_fencing(migrated_url: str) -> None:
    a, b, qid, rid = await _two(migrated_url)
    assert await a.cluster.acquire_query(qid, "A", ttl=30)
    assert not await b.cluster.acquire_query(qid, "B", ttl=30)  # held and fresh
    assert await a.cluster.renew_leases("A", ttl=30) == {qid}
    assert await b.cluster.unleased_queries() == []
    await cohorts_service.create_cohort(a, "c1", qid, rid, {}, "secagg", {"d1": 1}, owner="A")
    await _expire(a, qid)  # A went silent
    assert await b.cluster.unleased_queries() == [qid]
    assert await b.cluster.acquire_query(qid, "B", ttl=30)
    assert await a.cluster.renew_leases("A", ttl=30) == set()  # A learns it lost the lease
    with pytest.raises(QueryNotLive, match="lease lost"):  # and cannot store a sum any more
        await a.cohorts.finish("c1", np.array([1, 2, 3]), [1], {}, owner="A")
    with pytest.raises(QueryNotLive, match="lease lost"):
        await a.cohorts.mark_masked_input_closed("c1", owner="A")
    assert await b.cohorts.abort_running("server restarted", query_id=qid, keep_owner="B") == 1
    r = await b.rounds.by_id(rid)
    assert r is not None and r.contributors == 0
    views = {v.id: v for v in await b.cluster.list_processes(ttl=30)}
    assert views["B"].leases == [qid] and views["A"].leases == []
    await a.cluster.stop_process("A")
    assert not {v.id: v for v in await b.cluster.list_processes(ttl=30)}["A"].live
    await a.engine.dispose()
    await b.engine.dispose()


async def test_a_late_heartbeat_keeps_a_lapsed_lease_nobody_took(migrated_url: str) -> None:
    """A process too busy to heartbeat in time keeps its queries when no other process took them over
    (it used to find its own lease lapsed, stop the query and restart its round, again and again)."""
    a, b, qid, _ = await _two(migrated_url)
    assert await a.cluster.acquire_query(qid, "A", ttl=30)
    await _expire(a, qid)
    assert await a.cluster.renew_leases("A", ttl=30) == {qid}
    assert await b.cluster.unleased_queries() == []  # renewed: no longer up for takeover
    assert not await b.cluster.acquire_query(qid, "B", ttl=30)
    await a.engine.dispose()
    await b.engine.dispose()


async def test_graceful_stop_releases_leases_at_once(migrated_url: str) -> None:
    a, b, qid, _ = await _two(migrated_url)
    assert await a.cluster.acquire_query(qid, "A", ttl=300)
    await a.cluster.stop_process("A")
    assert await b.cluster.acquire_query(qid, "B", ttl=30)
    await a.engine.dispose()
    await b.engine.dispose()


async def test_devices_are_claimed_once_across_processes(migrated_url: str) -> None:
    a, b, _, _ = await _two(migrated_url)
    for d in ("d1", "d2", "d3"):
        await a.presence.mark_available([(d, time.time() + 30)])
    got_a, got_b = await asyncio.gather(a.presence.claim("ca", ["d1", "d2", "d3"]), b.presence.claim("cb", ["d3", "d2", "d1"]))
    assert sorted(got_a + got_b) == ["d1", "d2", "d3"]  # each device in exactly one cohort
    await a.presence.mark_available([("d1", time.time() + 30)])  # a check-in does not undo a claim
    assert await b.presence.available() == []
    await a.presence.release("ca")
    await b.presence.release("cb", ["d3"])
    assert await a.presence.available() == []  # freed devices wait for their next check-in
    await a.engine.dispose()
    await b.engine.dispose()


async def test_cancel_elsewhere_fences_the_masked_input_close(migrated_url: str) -> None:
    """Process B cancels (refund decided: nothing seen); A then tries to close the masked-input phase: refused,
    so no unmasking message can go out after a refund."""
    a, b, qid, rid = await _two(migrated_url)
    assert await a.cluster.acquire_query(qid, "A", ttl=30)
    await queries_service.set_status(a, qid, "running")
    await cohorts_service.create_cohort(a, "c1", qid, rid, {}, "secagg", {"d1": 1}, owner="A")
    assert await queries_service.set_status(b, qid, "cancelled")
    with pytest.raises(QueryNotLive, match="cancelled"):
        await a.cohorts.mark_masked_input_closed("c1", owner="A")
    (c,) = await a.cohorts.of_round(rid)
    assert not c.masked_input_closed
    await a.engine.dispose()
    await b.engine.dispose()


async def test_a_query_acquired_while_the_heartbeat_renews_is_not_taken_for_lost(start_app_server) -> None:  # type: ignore[no-untyped-def]
    """The heartbeat's renewal may run concurrently with a query task acquiring its lease; the renewal (which did not
    see the new lease) must not make the heartbeat stop that task (the query would stay pending forever under a
    lease this process keeps renewing)."""
    from analytics_server.state import STATE

    server = await start_app_server()
    orch = server.app[STATE].orchestrator
    running = asyncio.create_task(asyncio.sleep(60))
    renew = orch.store.cluster.renew_leases

    async def renew_while_acquired(owner: str, ttl: float) -> set[str]:
        held = await renew(owner, ttl)
        orch.tasks["q-new"] = running  # the query task acquired its lease meanwhile
        orch._held.add("q-new")
        return held

    orch.store.cluster.renew_leases = renew_while_acquired  # type: ignore[method-assign]
    try:
        await orch._heartbeat()
        assert not running.cancelled() and not running.done() and "q-new" in orch._held
    finally:
        orch.store.cluster.renew_leases = renew  # type: ignore[method-assign]
        orch.tasks.pop("q-new", None)
        orch._held.discard("q-new")
        running.cancel()
