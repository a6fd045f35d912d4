"""A server process that dies at any step of forming a cohort leaves nothing that keeps devices out of later
cohorts (issue 47, "No half-made cohort outlives its process").

Two apps on one database stand for two server processes, A and B; the devices check in only at B. A query is
submitted at A, which forms its first cohort from those devices and dies at one step of storing it
(`FORMATION_STEPS`, through `Store.fault_hook`): from then on no statement of A's reaches the database (its open
transaction rolls back, as the database does for a dead connection) and its port is closed; its lease is not
released. B takes the query over once that lease lapses and must complete it with the same devices — every one of
them, as the query needs them all. On PostgreSQL too when FA_TEST_POSTGRES_URL is set (`-m postgres` picks those);
tests/e2e/test_formation_crash_e2e.py does the same with real processes and SIGKILL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from sqlalchemy import event, update

from analytics_server.app import create_app
from analytics_server.db.engine import make_engine
from analytics_server.db.models import ServerProcess
from analytics_server.db.presence_store import ClaimLost
from analytics_server.db.store import QueryNotLive, Store
from analytics_server.settings import Settings
from analytics_server.services import cohorts_service, queries_service
from analytics_server.services.cohorts_service import FORMATION_STEPS
from analytics_server.state import STATE
from devstack.processes import free_port
from tests.analytics_server.conftest import TEST_SETTINGS
from tests.device_sdk.fleet import Fleet, analyst, query_end

WORDS = [["moon"], ["sun", "moon"], ["star"], ["moon"], ["sun"]]
SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
        "cohort": {"min_clients": len(WORDS), "max_clients": len(WORDS), "phase_timeout_s": 5,
                   "formation_timeout_s": 20}}
"""Every device is needed: one left claimed by A's half-made cohort and B can never form one."""
CLUSTER = {"lease_ttl_s": 2.0, "heartbeat_s": 0.2}
"""A dead process's lease lapses within seconds; B looks for unleased queries five times a second."""


class ProcessKilled(Exception):
    """The simulated death of a server process: raised at its fault step and by every statement it sends after."""


def kill_at(store: Store, step: str) -> asyncio.Event:
    """Make `store`'s process die at `step`: the hook raises there, and from then on every statement the store's
    engine would send raises instead (a dead process writes nothing more, not even its clean-up). Set when it died."""
    died = asyncio.Event()

    def hook(at: str) -> None:
        if at == step and not died.is_set():
            died.set()
            raise ProcessKilled(f"process died at {at}")

    def refuse(*_: Any) -> None:
        if died.is_set():
            raise ProcessKilled("this process is dead")

    event.listen(store.engine.sync_engine, "before_cursor_execute", refuse)
    store.fault_hook = hook
    return died


@pytest.fixture
async def start(db_url: str) -> AsyncIterator[Callable[[], Awaitable[TestServer]]]:
    """`await start()`: another app ("process") on the database, at a port of its own that it advertises."""
    servers: list[TestServer] = []

    async def one() -> TestServer:
        port = free_port()
        settings = Settings(**{**TEST_SETTINGS, **CLUSTER, "db_url": db_url, "port": port,
                               "advertise_url": f"http://127.0.0.1:{port}"})
        server = TestServer(create_app(settings), port=port)
        await server.start_server()
        servers.append(server)
        return server

    yield one
    for server in servers:
        await server.close()


async def until(predicate: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    async def poll() -> None:
        while not await predicate():
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(poll(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"not within {timeout_s:g} s: {what}") from None


@pytest.mark.parametrize("step", FORMATION_STEPS)
async def test_a_process_dying_while_a_cohort_forms_leaves_the_devices_to_the_next(
        start: Callable[[], Awaitable[TestServer]], step: str) -> None:
    b = await start()
    b_state = b.app[STATE]
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(b, http)
        devices = [fleet.add(rows) for rows in WORDS]
        try:
            await until(lambda: _available(b_state.store, len(WORDS)), 30, "every device checked in at B")
            a = await start()
            died = kill_at(a.app[STATE].store, step)
            spawn = b_state.orchestrator.spawn

            def spawn_once_a_died(query_id: str) -> None:  # B leaves the query to A, which leases it as it is
                if died.is_set():  # submitted there, until A is dead
                    spawn(query_id)

            b_state.orchestrator.spawn = spawn_once_a_died  # type: ignore[method-assign]
            hdr = await analyst(a)
            qid = await _submit(http, a)
            await asyncio.wait_for(died.wait(), 30)
            await a.close()  # its port closes; its lease stays until it lapses

            final = await query_end(http, str(b.make_url("")), qid, hdr, timeout_s=120)
        finally:
            await fleet.stop()
    assert final["status"] == "succeeded", final
    assert sum(final["result"]["result"]["counts"].values()) == len(WORDS)  # every device, once (one word each)
    assert all(d.contributions for d in devices)
    cohorts = await b_state.store.cohorts.of_round((await b_state.store.rounds.get(qid, 0)).id)  # type: ignore[union-attr]
    assert [c.status for c in cohorts if c.status != "aborted"] == ["finished"]
    assert all(c.reason == "server restarted" for c in cohorts if c.status == "aborted")  # A's stored one, if any
    presence = await b_state.store.presence.of([d.client.device_id for d in devices])
    assert all(cohort is None for cohort, _ in presence.values())  # nobody left claimed


async def _available(store: Store, n: int) -> bool:
    return await store.presence.count_available() >= n


async def test_claims_an_older_server_left_without_a_cohort_are_freed_by_the_next_query(
        start: Callable[[], Awaitable[TestServer]]) -> None:
    """A server version that claimed before storing the cohort, and died in between, left every device claimed
    for a cohort that does not exist: the next query to start frees them and runs on them."""
    b = await start()
    store = b.app[STATE].store
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(b, http)
        devices = [fleet.add(rows) for rows in WORDS]
        try:
            await until(lambda: _available(store, len(WORDS)), 30, "every device checked in")
            ids = [d.client.device_id for d in devices]
            assert await store.presence.claim("f" * 32, ids) == ids  # the claims, and then the old process died
            assert await store.presence.count_available() == 0
            final = await query_end(http, str(b.make_url("")), await _submit(http, b), await analyst(b), timeout_s=120)
        finally:
            await fleet.stop()
    assert final["status"] == "succeeded", final
    assert sum(final["result"]["result"]["counts"].values()) == len(WORDS)


async def _submit(http: aiohttp.ClientSession, server: TestServer) -> str:
    r = await http.post(str(server.make_url("/v1/queries")), json=SPEC, headers=await analyst(server))
    assert r.status == 201, await r.text()
    return str((await r.json())["id"])


async def _two_stores(url: str) -> tuple[Store, Store, str, int, list[str]]:
    a, b = Store(make_engine(url)), Store(make_engine(url))
    q = await queries_service.submit(a, "histogram", None, "words", {}, {}, 1, None, None)
    r = await a.rounds.create(q.id, 0, {}, None, 20, need=2, dim=3)
    devices = [f"dev{i}" for i in range(6)]
    for d in devices:
        await a.devices.register(d, d.encode().ljust(32, b"\0"))
    await a.presence.mark_available([(d, time.time() + 60) for d in devices])
    await a.cluster.register_process("A", "a", "http://a", "h", 1)
    await b.cluster.register_process("B", "b", "http://b", "h", 2)
    return a, b, q.id, r.id, devices


async def test_a_forming_cohort_claims_all_its_members_with_its_row_or_nothing(db_url: str) -> None:
    a, b, qid, rid, devs = await _two_stores(db_url)
    assert await a.cluster.acquire_query(qid, "A", ttl=30)
    assert await b.presence.claim("other", [devs[2]]) == [devs[2]]
    members = {d: i + 1 for i, d in enumerate(devs[:4])}
    with pytest.raises(ClaimLost) as lost:
        await cohorts_service.create_cohort(a, "c1", qid, rid, {}, "secagg", members, owner="A", claim=True)
    assert lost.value.lost == {devs[2]}
    assert await a.cohorts.of_round(rid) == [] and await a.rounds.members(rid) == set()
    assert {d for d, (c, _) in (await a.presence.of(devs)).items() if c is not None} == {devs[2]}  # rolled back
    await cohorts_service.create_cohort(a, "c2", qid, rid, {}, "secagg", {devs[0]: 1, devs[1]: 2}, owner="A", claim=True,
                          assignments={devs[0]: {"n": 1}, devs[1]: {"n": 2}})
    assert await a.presence.assignments_of_cohort("c2") == {devs[0]: {"n": 1}, devs[1]: {"n": 2}}
    assert await b.cluster.acquire_query(qid, "B", ttl=30, force=True)  # A lost the lease: it seats nobody
    with pytest.raises(QueryNotLive, match="lease lost"):
        await cohorts_service.create_cohort(a, "c3", qid, rid, {}, "secagg", {devs[3]: 1, devs[4]: 2}, owner="A", claim=True)
    assert {c.id for c in await a.cohorts.of_round(rid)} == {"c2"}
    assert (await a.presence.of([devs[3]]))[devs[3]][0] is None
    await a.engine.dispose()
    await b.engine.dispose()


async def test_the_sweep_frees_only_what_dead_processes_left(db_url: str) -> None:
    """Released: claims naming no running cohort, cohorts of ended queries whose process is dead. Kept: a running
    cohort's claims, and a live process's cohort even of an ended query (that process stops it itself)."""
    a, b, qid, rid, devs = await _two_stores(db_url)
    assert await a.cluster.acquire_query(qid, "A", ttl=30)
    await cohorts_service.create_cohort(a, "running", qid, rid, {}, "secagg", {devs[0]: 1, devs[1]: 2}, owner="A", claim=True)
    assert await a.presence.claim("f" * 32, [devs[2], devs[3]]) == [devs[2], devs[3]]  # no cohort row
    assert await b.cohorts.release_abandoned(ttl=30) == (0, 2)
    claims = {d: c for d, (c, _) in (await b.presence.of(devs)).items()}
    assert claims == {devs[0]: "running", devs[1]: "running", devs[2]: None, devs[3]: None, devs[4]: None, devs[5]: None}
    assert set(await b.presence.available()) == set(devs[2:])  # a released claim keeps the device's availability
    assert await queries_service.set_status(b, qid, "cancelled")  # while A is live: its cohort is A's to stop
    assert await b.cohorts.release_abandoned(ttl=30) == (0, 0)
    async with a.sessions() as s:  # A dies: its heartbeat grows old
        await s.execute(update(ServerProcess).where(ServerProcess.id == "A").values(heartbeat_at=time.time() - 60))
        await s.commit()
    assert await b.cohorts.release_abandoned(ttl=30) == (1, 0)
    (c,) = await b.cohorts.of_round(rid)
    assert (c.status, c.reason) == ("aborted", "its server process is gone")
    assert all(cohort is None for cohort, _ in (await b.presence.of(devs)).values())
    await a.engine.dispose()
    await b.engine.dispose()
