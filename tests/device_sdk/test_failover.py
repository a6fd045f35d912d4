"""Several server URLs: parsing, check-in failover (sticky), phase requests to the cohort's own process
(`Assignment.server_url`) and leaving a cohort whose process is unreachable, one round trip per phase, and
the analyst client's failover."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from analytics_server.state import STATE
from analyst_client.cli import AnalystClient
from device_sdk.client import DeviceClient, Outcome
from device_sdk.options import ClientOptions, NetworkOptions
from device_sdk.servers import parse_server_urls
from device_sdk.store import LocalStore
from tests.device_sdk.test_client import wait_ended

SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
        "cohort": {"min_clients": 3, "max_clients": 3, "phase_timeout_s": 3}}


def _closed_url() -> str:
    with socket.socket() as s:  # bound and closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_server_url_lists_are_parsed_and_validated() -> None:
    assert parse_server_urls("http://a:1/, https://b") == ["http://a:1", "https://b"]
    assert parse_server_urls(["http://a", "http://b/"]) == ["http://a", "http://b"]
    for bad in ("", " , ", "ftp://a", "a.example", "http://a?x=1", ["http://a", 3]):
        with pytest.raises(ValueError, match="server_url"):
            parse_server_urls(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="server_url"):
        DeviceClient([], LocalStore())


async def test_checkin_fails_over_to_the_next_url_and_stays_there(app_server: TestServer) -> None:
    good = str(app_server.make_url("")).rstrip("/")
    device = DeviceClient([_closed_url(), good], LocalStore(), ClientOptions(network=NetworkOptions(checkin_wait_s=0)))
    with pytest.raises(aiohttp.ClientError):
        await device.run_once()  # the first URL is down: the device moves on
    assert device.server == good
    for _ in range(3):
        assert (await device.run_once()).status == "idle"
    assert device.server == good  # sticky while it works
    await device.close()


async def _submit(app_server: TestServer) -> tuple[str, dict[str, str]]:
    token = await app_server.app[STATE].store.tokens.create("admin")
    hdr = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:
        r = await http.post(str(app_server.make_url("/v1/queries")), json=SPEC, headers=hdr)
        assert r.status == 201, await r.text()
        return (await r.json())["id"], hdr


async def test_phase_requests_go_to_the_cohort_server_and_an_unreachable_one_is_left(start_app_server: Any) -> None:
    """The process advertises a URL nobody listens on: devices check in here, get assignments naming that
    URL, cannot reach it, leave the cohort (aborted, not an exception) and can check in again."""
    gone = _closed_url()
    server = await start_app_server(advertise_url=gone)
    url = str(server.make_url("")).rstrip("/")
    await _submit(server)
    devices = []
    for _ in range(3):
        store = LocalStore()
        store.add("words", "moon")
        devices.append(DeviceClient(url, store, ClientOptions(network=NetworkOptions(checkin_wait_s=5))))

    async def until_assigned(d: DeviceClient) -> Outcome:  # a busy machine may form the cohort after one long-poll
        while (out := await d.run_once()).status == "idle":
            pass
        return out

    outcomes = await asyncio.wait_for(asyncio.gather(*(until_assigned(d) for d in devices)), 300)
    assert [o.status for o in outcomes] == ["aborted"] * 3, outcomes
    assert all("unreachable" in o.detail for o in outcomes)
    assert all(d.server == url for d in devices)  # the check-in server was fine: no failover
    again = await devices[0].run_once()  # back to checking in: its abandoned cohort is not run again
    assert again.status == "idle"
    for d in devices:
        await d.close()


@pytest.mark.parametrize("keys_with_checkin", [True, False])
async def test_one_round_trip_per_phase(app_server: TestServer, keys_with_checkin: bool) -> None:
    """Each phase POST carries `wait` and its answer is the next phase's message: no separate long-poll. With the
    keys sent in the check-in, the check-in's answer carries the first message and phase 0 has no request."""
    url = str(app_server.make_url("")).rstrip("/")
    requests: Counter[str] = Counter()

    async def on_start(_s: Any, _ctx: Any, params: aiohttp.TraceRequestStartParams) -> None:
        path = params.url.path
        requests[f"{params.method} {'next' if path.endswith('/next') else 'phase' if '/phases/' in path else path}"] += 1

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)
    qid, hdr = await _submit(app_server)
    stop = asyncio.Event()
    async with aiohttp.ClientSession(trace_configs=[trace]) as http:
        devices = []
        for _ in range(3):
            store = LocalStore()
            store.add("words", "sun")
            devices.append(DeviceClient(url, store,
                                        ClientOptions(keys_with_checkin=keys_with_checkin,
                                                      network=NetworkOptions(session=http, checkin_wait_s=2))))
        fleet = [asyncio.create_task(d.run_forever(stop)) for d in devices]
        async with aiohttp.ClientSession() as analyst:
            status = await wait_ended(analyst, url, qid, hdr)
        stop.set()
        await asyncio.gather(*fleet)
    assert status["status"] == "succeeded", status
    # advertise keys (unless sent with the check-in), share keys, masked input, consistency check, unmasking
    assert requests["POST phase"] == 3 * (4 if keys_with_checkin else 5)
    assert requests["GET next"] == 0


async def test_analyst_client_fails_over(app_server: TestServer) -> None:
    good = str(app_server.make_url("")).rstrip("/")
    token = await app_server.app[STATE].store.tokens.create("admin")
    client = AnalystClient(f"{_closed_url()},{good}", token)
    listed = await asyncio.to_thread(client.call, "GET", "/v1/queries")  # refused → next URL
    assert listed["queries"] == [] and client.server == good
    refused_first = AnalystClient([_closed_url(), good], token)
    created = await asyncio.to_thread(refused_first.submit, SPEC)  # refused before sending: safe to resend
    assert created["status"] in ("pending", "running")
    with pytest.raises(ValueError, match="server"):
        AnalystClient("", token)
