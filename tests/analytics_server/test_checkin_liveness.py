"""A device is seatable only while its check-in long-poll is open (issue 29): a client that closes the connection
mid long-poll is withdrawn at once, not left available for the rest of its long-poll, and no cohort seats it; a
long-poll that returns normally leaves the device available only for the short gap until its next check-in."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from sqlalchemy import select

from analytics_server.app import create_app

from analytics_server.db.engine import make_engine
from analytics_server.db.models import CohortMember, DevicePresence
from analytics_server.db.store import Store
from analytics_server.notify import Notifier
from analytics_server.pool import DevicePool
from analytics_server.settings import Settings
from analytics_server.state import STATE
from device_sdk import ClientOptions, DeviceClient, LocalStore, NetworkOptions
from devstack.processes import free_port
from fa_common.b64 import b64e
from queries.envelope import HDR_PROTOCOL, PROTOCOL_VERSION
from tests.analytics_server.conftest import TEST_SETTINGS
from tests.signed_device import SignedDevice

LONG_POLL_S = 60.0
"""The dropped clients' long-poll: without the withdrawal they would stay seatable for at least this long."""
WITHDRAWN_WITHIN_S = 10.0
"""Bound on noticing a closed connection and writing the withdrawal (0.2 s plus a commit on an idle machine;
generous for a loaded one, and far below LONG_POLL_S)."""


async def _until(read: Callable[[], Awaitable[Any]], ok: Callable[[Any], bool], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while not ok(got := await read()):
        assert time.monotonic() < deadline, f"condition not met within {timeout_s} s: last value {got!r}"
        await asyncio.sleep(0.02)
    return got


async def _until_of(store: Store, device_ids: list[str]) -> dict[str, float]:
    """Each device's availability deadline as stored (0.0: withdrawn)."""
    async with store.sessions() as s:
        rows = await s.execute(select(DevicePresence.device_id, DevicePresence.available_until)
                               .where(DevicePresence.device_id.in_(device_ids)))
        return {d: u for d, u in rows.all()}


async def _drop_long_polls(url: str, ghosts: list[SignedDevice], store: Store) -> None:
    """Each ghost opens a check-in long-poll on a connection of its own and, once the server has marked it
    available, closes that connection without waiting for the answer."""
    async with aiohttp.ClientSession() as http:
        for g in ghosts:
            assert (await g.post_json(http, url, "/v1/device/register", {"public_key": b64e(g.public)}))[0] == 201
    polls: list[tuple[aiohttp.ClientSession, asyncio.Task[Any]]] = []
    for g in ghosts:
        body = json.dumps({"wait_s": LONG_POLL_S}).encode()
        headers = {"Content-Type": "application/json", HDR_PROTOCOL: str(PROTOCOL_VERSION),
                   **g.signed_headers("POST", "/v1/device/checkin", body)}
        http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        polls.append((http, asyncio.create_task(http.post(url + "/v1/device/checkin", data=body, headers=headers))))
    ids = [g.device_id for g in ghosts]
    now = time.time()
    await _until(lambda: _until_of(store, ids), lambda got: len(got) == len(ids)
                 and all(u > now + LONG_POLL_S / 2 for u in got.values()), 30.0)
    for http, task in polls:
        task.cancel()  # the request is mid-answer: aiohttp closes its connection
        await asyncio.gather(task, return_exceptions=True)
        await http.close()
        assert task.cancelled()


@pytest.fixture
async def served(migrated_url: str, request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, web.Application]]:
    """(URL, app) of the app served as `fa-server serve` serves it (web.run_app: aiohttp does not cancel a handler
    whose client left), or with handler cancellation on (as aiohttp's TestServer does) when the test's
    parameter says so."""
    app = create_app(Settings(**{**TEST_SETTINGS, "db_url": migrated_url, "checkin_max_wait_s": LONG_POLL_S,
                                 "cohort_formation_wait_s": 1.0}))
    runner = web.AppRunner(app, handler_cancellation=request.param)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("served", [False, True], ids=["as-served", "handler-cancellation"], indirect=True)
async def test_a_closed_long_poll_is_withdrawn_at_once_and_never_seated(served: tuple[str, web.Application]) -> None:
    url, app = served
    st = app[STATE]
    ghosts = [SignedDevice() for _ in range(3)]
    ids = [g.device_id for g in ghosts]
    await _drop_long_polls(url, ghosts, st.store)
    started = time.monotonic()
    await _until(lambda: _until_of(st.store, ids), lambda got: all(u == 0.0 for u in got.values()), WITHDRAWN_WITHIN_S)
    assert time.monotonic() - started < WITHDRAWN_WITHIN_S < LONG_POLL_S
    assert st.pool.withdrawn == len(ghosts) and st.pool.waiting() == 0
    assert set(ids).isdisjoint(await st.store.presence.available())

    # a query that would take every available device (max 5) forms its cohort from the live ones only
    hdr = {"Authorization": f"Bearer {await st.store.tokens.create('admin')}"}
    spec = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
            "cohort": {"min_clients": 2, "max_clients": 5, "phase_timeout_s": 30}}
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        live = []
        for rows in (["moon"], ["sun"]):
            local = LocalStore()
            local.add_many("words", rows)
            live.append(DeviceClient(url, local,
                                     ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=2))))
        fleet = [asyncio.create_task(c.run_forever(stop)) for c in live]
        try:
            r = await http.post(url + "/v1/queries", json=spec, headers=hdr)
            assert r.status in (200, 201, 202), await r.text()
            qid = (await r.json())["id"]

            async def status() -> dict[str, Any]:
                return await (await http.get(f"{url}/v1/queries/{qid}", headers=hdr)).json()  # type: ignore[no-any-return]

            q = await _until(status, lambda q: q["status"] not in ("pending", "running"), 120.0)
        finally:
            stop.set()
            await asyncio.gather(*fleet)
    assert q["status"] == "succeeded", q
    async with st.store.sessions() as s:
        seated = set((await s.execute(select(CohortMember.device_id))).scalars())
    assert seated == {c.device_id for c in live}, "a cohort seated a device whose long-poll had closed"


async def test_withdrawal_keeps_a_newer_check_in(migrated_url: str) -> None:
    """A process withdraws only the availability its own long-poll wrote: a later check-in of the device (here
    or at another process) keeps its own `until`."""
    store = Store(make_engine(migrated_url))
    try:
        await store.presence.mark_available([("d1", time.time() + 30), ("d2", time.time() + 30)])
        old = await _until_of(store, ["d1", "d2"])
        await store.presence.mark_available([("d1", old["d1"] + 1.5)])  # d1 checked in again meanwhile
        await store.presence.withdraw_available([("d1", old["d1"]), ("d2", old["d2"])])
        assert await _until_of(store, ["d1", "d2"]) == {"d1": old["d1"] + 1.5, "d2": 0.0}
        assert await store.presence.available() == ["d1"]
    finally:
        await store.engine.dispose()


async def test_pool_ends_a_gone_long_poll_and_bounds_a_normal_one(migrated_url: str) -> None:
    store = Store(make_engine(migrated_url))
    pool = DevicePool(store, Notifier(), fresh_s=1.0)
    left = asyncio.Event()
    try:
        poll = asyncio.create_task(pool.checkin("d1", 60, gone=left.is_set))
        await _until(lambda: _until_of(store, ["d1"]), lambda got: got.get("d1", 0.0) > time.time() + 20, 10.0)
        assert pool.check_liveness() == 0 and not poll.done()  # still connected: nothing ends
        left.set()
        assert pool.check_liveness() == 1
        assert await asyncio.wait_for(poll, 10.0) == (None, False)
        assert await _until_of(store, ["d1"]) == {"d1": 0.0} and pool.withdrawn == 1

        # a long-poll that ran to its end: available only for fresh_s (plus twice the check-in lag) after it
        got = await pool.checkin("d2", 0.4, gone=lambda: False)
        returned = time.time()
        assert got == (None, True)
        until = (await _until_of(store, ["d2"]))["d2"]
        assert returned < until <= returned + pool.fresh_s + 2 * pool.lag_s + 0.05
        assert pool.withdrawn == 1
    finally:
        await store.engine.dispose()


async def test_a_draining_pool_ends_open_long_polls_and_takes_no_new_ones(migrated_url: str) -> None:
    store = Store(make_engine(migrated_url))
    pool = DevicePool(store, Notifier(), fresh_s=1.0)
    try:
        poll = asyncio.create_task(pool.checkin("d1", 60, gone=lambda: False))
        await _until(lambda: _until_of(store, ["d1"]), lambda got: got.get("d1", 0.0) > time.time() + 20, 10.0)
        pool.drain()
        assert await asyncio.wait_for(poll, 10.0) == (None, False)  # at once, not after its 30–60 s
        assert await _until_of(store, ["d1"]) == {"d1": 0.0}  # withdrawn: this process will not seat it
        assert await asyncio.wait_for(pool.checkin("d2", 60), 10.0) == (None, False)
        assert pool.waiting() == 0
    finally:
        await store.engine.dispose()


async def test_shutdown_answers_the_open_long_polls_before_cancelling_requests(migrated_url: str) -> None:
    """`fa-server` stopping with check-in long-polls open: each is answered (no assignment) before aiohttp waits
    for the open requests; none is left to be cancelled (aiohttp 3.14 can log an InvalidStateError traceback when
    it cancels one late in its shutdown)."""
    app = create_app(Settings(**{**TEST_SETTINGS, "db_url": migrated_url, "checkin_max_wait_s": LONG_POLL_S}))
    runner = web.AppRunner(app)  # shutdown_timeout 60 s: without the drain, cleanup waits the long-polls out
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}"
    devices = [SignedDevice() for _ in range(3)]
    cleaned = False
    try:
        async with aiohttp.ClientSession() as http:
            for d in devices:
                assert (await d.post_json(http, url, "/v1/device/register", {"public_key": b64e(d.public)}))[0] == 201
            polls = [asyncio.create_task(d.post_json(http, url, "/v1/device/checkin", {"wait_s": LONG_POLL_S}))
                     for d in devices]
            await _until(lambda: asyncio.sleep(0, app[STATE].pool.waiting()), lambda n: n == len(devices), 30.0)
            started = time.monotonic()
            await runner.cleanup()
            cleaned = True
            answers = await asyncio.gather(*polls)
            took = time.monotonic() - started
        assert [status for status, _ in answers] == [200] * len(devices), answers
        assert all("assignment" not in body and body["retry_after"] > 0 for _, body in answers), answers
        assert took < LONG_POLL_S / 2, f"shutdown waited {took:.1f} s for the long-polls"  # each lasts ≥ 30 s
    finally:
        if not cleaned:
            await runner.cleanup()
