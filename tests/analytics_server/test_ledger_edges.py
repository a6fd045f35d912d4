"""Ledger edges in process: a finished sum is never stored for a terminal query (checked in the same
transaction), a cohort whose query died meanwhile aborts after recording that its masked-input phase closed,
and `cancel` stops the query's cohorts before it decides about the refund."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from analytics_server.cohort import CohortRuntime
from analytics_server.db.engine import make_engine
from analytics_server.db.store import QueryNotLive, Store, vec_from_bytes
from analytics_server.metrics import Metrics
from analytics_server.orchestrator import Orchestrator
from analytics_server.cluster import identity_for
from analytics_server.notify import Notifier
from analytics_server.pool import DevicePool
from analytics_server.services import cohorts_service, queries_service
from analytics_server.settings import Settings
from queries import dp
from secagg import ClientSession, SecAggConfig, ServerSession, encoding

BUDGET = dp.Budget(10.0, 1e-4)


async def _charged_query(store: Store, n: int, dim: int = 3) -> tuple[str, int, list[str]]:
    q = await queries_service.submit(store, "histogram", None, "w", {}, {}, 1, None, None, cost=dp.PrivacyCost(1.0, 1e-6),
                                 default_budget=BUDGET)
    r = await store.rounds.create(q.id, 0, {}, None, 16, need=2, dim=dim)
    devices = [f"dev{i:03d}" for i in range(n)]
    for d in devices:
        await store.devices.register(d, d.encode().ljust(32, b"\0"))
    return q.id, r.id, devices


async def test_finish_cohort_refuses_a_terminal_query(migrated_url: str) -> None:
    store = Store(make_engine(migrated_url))
    qid, rid, devs = await _charged_query(store, 2)
    await cohorts_service.create_cohort(store, "c1", qid, rid, {}, "secagg", {devs[0]: 1, devs[1]: 2})
    assert await queries_service.set_status(store, qid, "cancelled")
    with pytest.raises(QueryNotLive, match="cancelled"):
        await store.cohorts.finish("c1", np.array([1, 2, 3]), [1, 2], {})
    r = await store.rounds.by_id(rid)
    assert r is not None and r.contributors == 0 and vec_from_bytes(r.aggregate).tolist() == [0, 0, 0]
    (c,) = await store.cohorts.of_round(rid)
    assert c.status == "running" and c.sum is None
    await store.engine.dispose()


async def test_cohort_of_a_dead_query_closes_masked_input_then_aborts_without_a_sum(migrated_url: str) -> None:
    """The query is cancelled while its cohort runs: the cohort records that its masked-input phase closed
    (so the charge is kept), and its sum is refused and dropped; the cohort ends aborted."""
    store = Store(make_engine(migrated_url))
    n, dim, bits = 3, 3, 16
    qid, rid, devs = await _charged_query(store, n, dim)
    cfg = SecAggConfig(session_id=b"s" * 16, n=n, dim=dim, bits=bits, min_survivors=2)
    members = {d: i + 1 for i, d in enumerate(devs)}
    await cohorts_service.create_cohort(store, "c", qid, rid, cfg.to_dict(), "secagg", members)
    cohort = CohortRuntime("c", qid, rid, ServerSession(cfg), bits, members, 5.0, store, Metrics(),
                           ThreadPoolExecutor(2), lambda _: None)
    runner = asyncio.create_task(cohort.run())
    await queries_service.set_status(store, qid, "running")

    async def device(d: str, p: int) -> None:
        client = ClientSession(cfg, p, encoding.to_modular(np.ones(dim, dtype=np.int64), bits))
        msg, phase = client.start(), 0
        while True:
            if phase == 4 and p == 1:  # the query is cancelled while the server collects unmasking shares
                await queries_service.set_status(store, qid, "cancelled")
            await cohort.submit(d, phase, msg)
            nxt = await cohort.next_message(d, phase, 10)
            if nxt.kind != "message":
                return
            msg, phase = client.receive(nxt.body), nxt.phase

    await asyncio.gather(*(device(d, p) for d, p in members.items()), return_exceptions=True)
    await runner
    assert cohort.status == "aborted" and "cancelled" in (cohort.reason or ""), cohort.reason
    (row,) = await store.cohorts.of_round(rid)
    assert (row.status, row.sum, row.masked_input_closed) == ("aborted", None, True)
    r = await store.rounds.by_id(rid)
    assert r is not None and r.contributors == 0
    assert (await store.budgets.get("w", BUDGET)).spent_epsilon == 1.0  # masked inputs closed: not refunded
    await store.engine.dispose()


async def test_cancel_stops_the_cohorts_before_the_refund_decision(migrated_url: str) -> None:
    """A cohort that closes its masked-input phase while it is being stopped must still count: `cancel` waits
    for the query task (and its cohorts) to end, then decides about the refund in the status transaction."""
    store = Store(make_engine(migrated_url))
    qid, rid, devs = await _charged_query(store, 2)
    await cohorts_service.create_cohort(store, "c", qid, rid, {}, "secagg", {devs[0]: 1, devs[1]: 2})
    await queries_service.set_status(store, qid, "running")
    settings = Settings(db_url=migrated_url)
    notifier = Notifier()
    orch = Orchestrator(store, settings, DevicePool(store, notifier, 1.0), Metrics(), ThreadPoolExecutor(1),
                        identity_for(settings), notifier)
    status_when_stopped: list[str] = []

    async def query_task() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:  # as a cohort whose masked-input phase closes while it is stopped
            q = await store.queries.get(qid)
            assert q is not None
            status_when_stopped.append(q.status)
            await store.cohorts.mark_masked_input_closed("c")
            await store.cohorts.abort("c", "query cancelled")
            raise

    orch.tasks[qid] = asyncio.create_task(query_task())
    await asyncio.sleep(0)
    assert await orch.cancel(qid)
    assert status_when_stopped == ["running"]  # stopped before the query was marked cancelled
    q = await store.queries.get(qid)
    assert q is not None and q.status == "cancelled"
    state = await store.budgets.get("w", BUDGET)
    assert (state.spent_epsilon, state.queries_charged) == (1.0, 1)
    assert not await orch.cancel(qid)  # already terminal
    await store.engine.dispose()
