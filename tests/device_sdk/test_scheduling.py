"""Scheduling and the plain API over real HTTP: an ineligible device never checks in, `stop()` takes effect
within a second even during a long-poll, `start()`/`stop()` and `run_once_sync()` from plain code, a full
opt-out stops the device, pace steering (`retry_after`) is honoured, and an unawaited `run_forever()` says so."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

import pytest
from aiohttp.test_utils import TestServer

from analytics_server.state import STATE
from device_sdk import Callbacks, ClientOptions, DeviceClient, LocalStore, NetworkOptions
from device_sdk.client import Outcome


def _checkins(server: TestServer) -> int:
    return server.app[STATE].metrics.checkins


async def _until(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_an_ineligible_device_never_checks_in(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server()
    url = str(server.make_url(""))
    facts = {"charging": False}
    polls = [0]

    def eligible() -> bool:
        polls[0] += 1
        return facts["charging"]

    store = LocalStore()
    store.add("words", "moon")
    client = DeviceClient(url, store,
                          ClientOptions(eligible=eligible,
                                        ineligible_poll_s=0.05,
                                        network=NetworkOptions(checkin_wait_s=1)))
    client.start()
    try:
        await _until(lambda: polls[0] >= 10)  # ten times asked, ten times not eligible
        assert _checkins(server) == 0
        assert await server.app[STATE].store.devices.key(client.device_id) is None  # not even registered
        client.ineligible_poll_s = 3600
        asked = polls[0]
        await _until(lambda: polls[0] > asked)  # asked once more: now in an hour-long pause
        facts["charging"] = True  # the app's facts change and it says so: the device checks in at once
        client.wake()
        await _until(lambda: _checkins(server) >= 1, timeout=5)
    finally:
        assert client.stop()


async def test_stop_returns_within_a_second_during_a_long_poll(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server(checkin_max_wait_s=30)
    client = DeviceClient(str(server.make_url("")), LocalStore(),
                          ClientOptions(network=NetworkOptions(checkin_wait_s=30)))
    client.start()
    await _until(lambda: _checkins(server) == 1)  # the device now waits in its 30 s long-poll
    await asyncio.sleep(0.2)
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    ended = await loop.run_in_executor(None, client.stop, 5.0)
    elapsed = time.monotonic() - started
    assert ended and not client.running
    assert elapsed < 1.0, f"stop() took {elapsed:.2f} s"
    assert _checkins(server) == 1


async def test_run_forever_stops_at_once_when_its_event_is_set(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server(checkin_max_wait_s=30)
    client = DeviceClient(str(server.make_url("")), LocalStore(),
                          ClientOptions(network=NetworkOptions(checkin_wait_s=30)))
    stop = asyncio.Event()
    task = asyncio.create_task(client.run_forever(stop))
    await _until(lambda: _checkins(server) == 1)
    stop.set()
    await asyncio.wait_for(task, 1.0)  # raises TimeoutError if the long-poll kept it
    await client.close()


async def test_run_once_sync_from_plain_code_and_misuse(start_app_server) -> None:  # type: ignore[no-untyped-def]
    """Plain code (here a worker thread): `run_once_sync()` checks in once on a private loop, again and again.
    Inside a running loop, or while the background thread runs, it says what to do instead."""
    server = await start_app_server()
    client = DeviceClient(str(server.make_url("")), LocalStore(),
                          ClientOptions(network=NetworkOptions(checkin_wait_s=0)))
    loop = asyncio.get_running_loop()
    outs = [await loop.run_in_executor(None, client.run_once_sync) for _ in range(2)]
    assert [o.status for o in outs] == ["idle", "idle"] and _checkins(server) == 2
    with pytest.raises(RuntimeError, match="await client.run_once"):
        client.run_once_sync()
    client.start()
    try:
        with pytest.raises(RuntimeError, match="stop"):
            await loop.run_in_executor(None, client.run_once_sync)
        with pytest.raises(RuntimeError, match="already running"):
            client.start()
    finally:
        assert client.stop()


async def test_full_opt_out_deletes_everything_and_stops_the_device(start_app_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server()
    store = LocalStore(tmp_path / "device.db")
    store.add_many("words", ["moon", "sun"])
    store.add("features", {"age": 31.0})
    client = DeviceClient(str(server.make_url("")), store, ClientOptions(network=NetworkOptions(checkin_wait_s=1)))
    client.start()
    await _until(lambda: _checkins(server) >= 1)
    assert client.opt_out() == 3
    await _until(lambda: not client.running, timeout=2.0)
    assert store.collections() == [] and store.is_opted_out()
    store.add("words", "star")  # the app keeps recording: dropped
    assert store.rows("words") == []
    before = _checkins(server)
    out = await client.run_once()
    assert out == Outcome("paused", retry_after=client.ineligible_poll_s, detail="opted out")
    assert _checkins(server) == before
    reopened = LocalStore(tmp_path / "device.db")  # survives a restart of the app
    assert reopened.is_opted_out() and reopened.collections() == []
    await client.close()


async def test_pace_steering_waits_at_least_retry_after(start_app_server, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An idle answer's `retry_after` is honoured (with up to 10 % jitter), not cut short."""
    server = await start_app_server(retry_after_s=0.4, checkin_max_wait_s=0)
    client = DeviceClient(str(server.make_url("")), LocalStore(),
                          ClientOptions(network=NetworkOptions(checkin_wait_s=0)))
    stamps: list[float] = []
    original = client.run_once

    async def timed() -> Outcome:
        stamps.append(time.monotonic())
        return await original()

    monkeypatch.setattr(client, "run_once", timed)
    stop = asyncio.Event()
    task = asyncio.create_task(client.run_forever(stop))
    await _until(lambda: len(stamps) >= 4)
    stop.set()
    await task
    await client.close()
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert min(gaps) >= 0.4, gaps


def test_an_unawaited_run_forever_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    client = DeviceClient("http://127.0.0.1:9", LocalStore())
    with caplog.at_level(logging.ERROR, logger="device_sdk"):
        client.run_forever()  # the mistake: a coroutine called from plain code
        gc.collect()
    (record,) = [r for r in caplog.records if "never" in r.getMessage() or "without being awaited" in r.getMessage()]
    assert record.levelno == logging.ERROR
    assert "DeviceClient.run_forever() is a coroutine function" in record.getMessage()
    assert "client.start()" in record.getMessage()


async def test_awaited_coroutines_stay_quiet(caplog: pytest.LogCaptureFixture) -> None:
    """Awaited, run as tasks or by asyncio.run: no report (and no 'never awaited' warning)."""
    client = DeviceClient("http://127.0.0.1:9", LocalStore(),
                          ClientOptions(network=NetworkOptions(backoff_base_s=0.01, backoff_cap_s=0.02)))
    with caplog.at_level(logging.ERROR, logger="device_sdk"):
        stop = asyncio.Event()
        task = asyncio.create_task(client.run_forever(stop))
        await asyncio.sleep(0.1)
        stop.set()
        await task
        with pytest.raises(Exception):
            await client.run_once()
        gc.collect()
    await client.close()
    assert not [r for r in caplog.records if "without being awaited" in r.getMessage()]


async def test_a_server_answering_garbage_does_not_kill_the_device() -> None:
    """A fake server speaking the wire protocol badly (a check-in answer that is not an assignment): the device
    reports it through on_error and backs off, instead of its loop (or the app's thread) dying."""
    from aiohttp import web

    from fa_common.b64 import b64d
    from queries.envelope import device_id_for

    checkins = 0

    async def register(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"device_id": device_id_for(b64d(body["public_key"], "public_key", 32))}, status=201)

    async def checkin(request: web.Request) -> web.Response:
        nonlocal checkins
        checkins += 1
        return web.json_response({"assignment": {"query_id": 7}, "queries_running": "many"})

    app = web.Application()
    app.router.add_post("/v1/device/register", register)
    app.router.add_post("/v1/device/checkin", checkin)
    fake = TestServer(app)
    await fake.start_server()
    errors: list[BaseException] = []
    client = DeviceClient(str(fake.make_url("")), LocalStore(),
                          ClientOptions(network=NetworkOptions(backoff_base_s=0.01, backoff_cap_s=0.05),
                                        callbacks=Callbacks(on_error=errors.append)))
    stop = asyncio.Event()
    task = asyncio.create_task(client.run_forever(stop))
    await _until(lambda: checkins >= 3)
    assert not task.done()
    stop.set()
    await task
    await client.close()
    await fake.close()
    assert errors and all("malformed check-in answer" in str(e) for e in errors)
