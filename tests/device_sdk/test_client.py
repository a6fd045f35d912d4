"""DeviceClient against the real app in process: registration persisted, a full cohort, back-off."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from analytics_server.state import STATE
from analyst_client.cli import format_result
from device_sdk.client import REGISTERED_META, DeviceClient, ProtocolVersionError
from device_sdk.options import ClientOptions, NetworkOptions
from device_sdk.store import LocalStore
from queries.envelope import PROTOCOL_VERSION
from queries.local_run import run_locally
from queries.registry import get_kind
from secagg.phases import Phase

SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"], "other_bucket": "other"},
        "cohort": {"min_clients": 5, "max_clients": 50, "phase_timeout_s": 3}}


async def _run_query(http: aiohttp.ClientSession, url: str, spec: dict[str, Any], hdr: dict[str, str]) -> dict[str, Any]:
    """Submit `spec`, poll until it ends (≤ 30 s), require success; its result."""
    r = await http.post(url + "/v1/queries", json=spec, headers=hdr)
    assert r.status == 201, await r.text()
    qid = (await r.json())["id"]
    status = await wait_ended(http, url, qid, hdr)
    assert status["status"] == "succeeded", status
    return await (await http.get(f"{url}/v1/queries/{qid}/result", headers=hdr)).json()


async def wait_ended(http: aiohttp.ClientSession, url: str, qid: str, hdr: dict[str, str], timeout_s: float = 30) -> dict[str, Any]:
    """Poll the query's status until it is no longer pending or running (at most `timeout_s`); the last status."""
    for _ in range(int(timeout_s * 10)):
        status = await (await http.get(f"{url}/v1/queries/{qid}", headers=hdr)).json()
        if status["status"] not in ("pending", "running"):
            break
        await asyncio.sleep(0.1)
    return status


async def test_registration_is_persisted(app_server: TestServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = str(app_server.make_url(""))
    store = LocalStore(tmp_path / "d.db")
    a = DeviceClient(url, store, ClientOptions(network=NetworkOptions(checkin_wait_s=0)))
    assert await a.ensure_registered() == a.device_id
    assert store.get_meta(REGISTERED_META + ":" + url.rstrip("/")) is not None
    out = await a.run_once()
    assert out.status == "idle" and out.retry_after == 0.5
    await a.close()
    b = DeviceClient(url, LocalStore(tmp_path / "d.db"), ClientOptions(network=NetworkOptions(checkin_wait_s=0)))
    assert b.device_id == a.device_id
    await b.close()


async def test_devices_complete_a_histogram(app_server: TestServer) -> None:
    url = str(app_server.make_url(""))
    st = app_server.app[STATE]
    token = await st.store.tokens.create("admin")
    rng = np.random.default_rng(3)
    data = [[str(w) for w in rng.choice(["moon", "sun", "star"], size=int(rng.integers(1, 4)))] for _ in range(8)]
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        clients = []
        for rows in data:
            store = LocalStore()
            store.add_many("words", rows)
            clients.append(DeviceClient(url, store,
                                        ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=1))))
        fleet = [asyncio.create_task(c.run_forever(stop)) for c in clients]
        hdr = {"Authorization": f"Bearer {token}"}
        res = await _run_query(http, url, SPEC, hdr)
        stop.set()
        await asyncio.gather(*fleet)
    expected, _ = run_locally(get_kind("histogram"), SPEC["params"], data)
    assert res["result"] == expected  # no dropouts: every device contributed
    assert "bucket,count,std,ci95_lo,ci95_hi,suppressed" in format_result(res, "csv")
    assert json.loads(format_result(res, "json"))["kind"] == "histogram"
    assert "histogram result" in format_result(res, "table")


async def test_a_server_of_another_protocol_version_stops_the_device(
    app_server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK sends its protocol version (the server accepts it); when the server speaks another one, the
    SDK raises ProtocolVersionError naming the server's version, and run_forever stops instead of retrying."""
    from analytics_server.http import device as device_routes

    client = DeviceClient(str(app_server.make_url("")), LocalStore(),
                          ClientOptions(network=NetworkOptions(checkin_wait_s=0)))
    assert (await client.run_once()).status == "idle"
    monkeypatch.setattr(device_routes, "PROTOCOL_VERSION", PROTOCOL_VERSION + 1)
    with pytest.raises(ProtocolVersionError) as exc:
        await client.run_once()
    assert exc.value.status == 400 and exc.value.server_version == str(PROTOCOL_VERSION + 1)
    assert f"speaks device protocol {PROTOCOL_VERSION + 1}" in exc.value.message
    with pytest.raises(ProtocolVersionError):
        await asyncio.wait_for(client.run_forever(asyncio.Event()), 5)
    await client.close()


async def test_network_errors_back_off_exponentially() -> None:
    client = DeviceClient("http://127.0.0.1:9", LocalStore(),
                          ClientOptions(network=NetworkOptions(backoff_base_s=0.01, backoff_cap_s=0.2)))
    calls = 0
    original = client.run_once

    async def counting() -> object:
        nonlocal calls
        calls += 1
        return await original()

    client.run_once = counting  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(client.run_forever(stop))
    await asyncio.sleep(1.0)
    stop.set()
    await task
    await client.close()
    # full jitter with base 10 ms, cap 200 ms: a few dozen attempts a second, never a hot loop
    assert 3 <= calls <= 200, calls


async def _sse(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> list[tuple[int | None, str, Any]]:
    """The whole event stream as (id, event, data) until the server closes it."""
    out, event_id, event = [], None, ""
    async with http.get(url, headers=headers) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                out.append((event_id, event, json.loads(line[6:])))
                event_id = None
    return out


async def test_active_threat_model_and_sse(start_app_server) -> None:  # type: ignore[no-untyped-def]
    """FA_THREAT_MODEL=active: devices sign with their registration key. SSE: progress, the query's stored
    events in order (ids increasing; a reconnect with Last-Event-ID resumes after it), then the end."""
    server = await start_app_server(threat_model="active")
    url = str(server.make_url(""))
    token = await server.app[STATE].store.tokens.create("analyst")
    hdr = {"Authorization": f"Bearer {token}"}
    stop = asyncio.Event()
    data = [["moon"], ["sun", "moon"], ["star"], ["moon"], [], ["sun"]]
    try:
        async with aiohttp.ClientSession() as http:
            r = await http.post(url + "/v1/queries", json={**SPEC, "cohort": {"min_clients": 4, "phase_timeout_s": 3}}, headers=hdr)
            qid = (await r.json())["id"]
            clients = []
            for rows in data:
                store = LocalStore()
                store.add_many("words", rows)
                clients.append(DeviceClient(url, store,
                                            ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=1))))
            fleet = [asyncio.create_task(c.run_forever(stop)) for c in clients]
            stream = await _sse(http, f"{url}/v1/queries/{qid}/events", hdr)
            res = await (await http.get(f"{url}/v1/queries/{qid}/result", headers=hdr)).json()
            stop.set()
            await asyncio.gather(*fleet)
            events = [e for _, e, _ in stream]
            assert events[0] == "progress" and events[-1] == "end" and stream[-1][2] == {"status": "succeeded"}
            stored = [(i, e, d) for i, e, d in stream if i is not None]
            assert [i for i, _, _ in stored] == sorted({i for i, _, _ in stored})
            assert [e for _, e, _ in stored] == [
                "query.submitted", "query.running", "round.started", "cohort.formed",
                *["cohort.phase"] * 4, "cohort.finished", "round.decoded", "query.succeeded",
            ]
            phases = [d["data"]["phase"] for _, e, d in stored if e == "cohort.phase"]
            assert phases == ["share_keys", "masked_input", "consistency_check", "unmasking"]  # active model
            formed = next(d for _, e, d in stored if e == "cohort.formed")
            assert formed["data"] == {"n": len(data)} and formed["cohort_id"]
            # reconnecting after the cohort formed replays only what came after it
            resumed = await _sse(http, f"{url}/v1/queries/{qid}/events", {**hdr, "Last-Event-ID": str(stored[3][0])})
            assert [e for i, e, _ in resumed if i is not None] == [e for _, e, _ in stored[4:]]
            assert resumed[-1][1] == "end"
        (cohort,) = await server.app[STATE].store.cohorts.of_round(1)
        assert cohort.secagg["threat_model"] == "active" and cohort.phase == Phase.DONE
        expected, _ = run_locally(get_kind("histogram"), SPEC["params"], data)
        assert res["result"] == expected
    finally:
        stop.set()


async def test_fleet_until_idle_exits_and_truth_matches_keys(app_server: TestServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from fleet_sim.simulator import make_devices, run_fleet, write_truth

    devices = make_devices(4, "words", seed=3)
    write_truth(tmp_path / "truth.json", "words", 3, devices)
    truth = json.loads((tmp_path / "truth.json").read_text())
    stats = await asyncio.wait_for(
        run_fleet(str(app_server.make_url("")), devices, until_idle=True, idle_s=1.5, checkin_wait_s=0.2), 20
    )
    assert stats.outcomes.get("idle", 0) >= 4
    registered = {d for d in truth["devices"] if await app_server.app[STATE].store.devices.key(d) is not None}
    assert registered == set(truth["devices"]) and len(registered) == 4


async def test_distributed_noise_reaches_devices_and_result(app_server: TestServer) -> None:
    """A discrete-Gaussian query: the assignment carries the noise block, devices add their share, the result
    reports (ε, δ) and the per-round noise."""
    url = str(app_server.make_url(""))
    st = app_server.app[STATE]
    token = await st.store.tokens.create("analyst")
    hdr = {"Authorization": f"Bearer {token}"}
    spec = {**SPEC, "privacy": {"epsilon": 2.0, "delta": 1e-6, "mechanism": "discrete_gaussian"},
            "cohort": {"min_clients": 6, "max_clients": 50, "phase_timeout_s": 3}}
    stop = asyncio.Event()
    seen_noise = []
    async with aiohttp.ClientSession() as http:
        clients = []
        for i in range(8):
            store = LocalStore()
            store.add_many("words", ["moon"] if i % 2 else ["sun"])
            c = DeviceClient(url, store, ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=1)))
            original = c.run_assignment

            async def spy(a, *args, original=original):  # type: ignore[no-untyped-def]
                seen_noise.append(a.noise)
                return await original(a, *args)

            c.run_assignment = spy  # type: ignore[method-assign]
            clients.append(c)
        fleet = [asyncio.create_task(c.run_forever(stop)) for c in clients]
        res = await _run_query(http, url, spec, hdr)
        stop.set()
        await asyncio.gather(*fleet)
    assert seen_noise and all(n is not None and n.mechanism == "discrete_gaussian" and n.scale > 0 for n in seen_noise)
    priv = res["privacy"]
    assert priv["mechanism"] == "discrete_gaussian" and priv["epsilon"] == 2.0 and priv["delta"] == 1e-6
    assert priv["contributors"] == [res["result"]["clients"]] and priv["noise"][0]["sigma"] > 0
    assert set(res["result"]["counts"]) | set(res["result"]["suppressed"]) == {"moon", "sun", "other"}
