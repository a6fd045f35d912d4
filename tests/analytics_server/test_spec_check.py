"""The submit-time spec check runs in a checker thread with a time limit: the event loop keeps answering
while a spec is checked, a check that overruns is a 422 naming the limit, and a check that cannot even start
(both checker threads busy) is a 503 with Retry-After."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from analytics_server import spec_check
from analytics_server.app import create_app
from analytics_server.db.engine import make_engine
from analytics_server.db.store import Store
from analytics_server.settings import Settings

SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]}}


class BlockingCheck:
    """Replaces `check_spec`: each call announces itself and waits until released, then runs the real check."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)
        self.never_released = False
        """Set when a check gave up waiting: the test could not release it (its event loop was blocked)."""
        self.real = spec_check.check_spec

    def __call__(self, raw: Any, settings: Settings) -> spec_check.CheckedSpec:
        self.started.release()
        if not self.release.wait(10):
            self.never_released = True
        return self.real(raw, settings)

    async def wait_started(self) -> None:
        assert await asyncio.to_thread(self.started.acquire, True, 30), "the check never started"


@pytest.fixture
async def blocking(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[BlockingCheck]:
    check = BlockingCheck()
    monkeypatch.setattr(spec_check, "check_spec", check)
    yield check
    check.release.set()  # free the checker threads for the next test


async def _server(url: str, **settings: Any) -> tuple[TestServer, str]:
    store = Store(make_engine(url))
    token = await store.tokens.create("analyst")
    await store.engine.dispose()
    server = TestServer(create_app(Settings(db_url=url, **settings)))
    await server.start_server()
    return server, token


async def test_the_event_loop_answers_while_a_spec_is_checked(migrated_url: str, blocking: BlockingCheck) -> None:
    server, token = await _server(migrated_url)
    try:
        async with ClientSession(str(server.make_url(""))) as http:
            submit = asyncio.create_task(http.post("/v1/queries", json=SPEC, headers={"Authorization": f"Bearer {token}"}))
            await blocking.wait_started()
            health = await http.get("/healthz")  # answered while the check is still running in its thread
            assert health.status == 200 and not submit.done()
            blocking.release.set()
            r = await submit
            assert r.status == 201, await r.text()
        assert not blocking.never_released
    finally:
        await server.close()


async def test_overrunning_and_unstarted_checks_are_refused(migrated_url: str, blocking: BlockingCheck) -> None:
    server, token = await _server(migrated_url, spec_check_timeout_s=0.5)
    auth = {"Authorization": f"Bearer {token}"}
    try:
        async with ClientSession(str(server.make_url(""))) as http:
            running = [asyncio.create_task(http.post("/v1/queries", json=SPEC, headers=auth))
                       for _ in range(spec_check.CHECK_THREADS)]
            for _ in running:
                await blocking.wait_started()  # every checker thread is now busy
            queued = await http.post("/v1/queries", json=SPEC, headers=auth)
            assert queued.status == 503 and "busy" in (await queued.json())["error"]
            assert int(queued.headers["Retry-After"]) >= 1
            for task in running:
                r = await task
                body = await r.json()
                assert r.status == 422 and "FA_SPEC_CHECK_TIMEOUT_S" in body["error"], body
            blocking.release.set()
            await asyncio.sleep(0)  # the overrun checks finish in their threads; nothing was stored
            listed = await (await http.get("/v1/queries", headers=auth)).json()
            assert listed["queries"] == []
    finally:
        await server.close()
