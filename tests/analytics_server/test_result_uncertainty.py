"""`GET /v1/queries/{id}/result` carries `uncertainty` (every released noisy value's std and 95 % interval) and
`warnings`; a failed query whose kind released a result (diverged training) keeps it readable. In process: the
real app, a small fleet of DeviceClients for a noisy histogram, the store for the failed case."""

from __future__ import annotations

import asyncio

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from analytics_server.services import queries_service
from analytics_server.state import STATE
from device_sdk.client import DeviceClient
from device_sdk.options import ClientOptions, NetworkOptions
from device_sdk.store import LocalStore
from queries.selective import released_interval
from queries.uncertainty import Z95
from tests.device_sdk.test_client import _run_query

BUCKETS = ["moon", "sun", *(f"w{i}" for i in range(14))]
"""Sixteen buckets at threshold 0: some count is released whatever the noise (all 16 below 0: ≈ 2e-6)."""
SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": BUCKETS, "release_threshold": 0},
        "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
        "cohort": {"min_clients": 6, "max_clients": 10, "phase_timeout_s": 3}}


async def test_noisy_result_has_intervals_and_warnings(app_server: TestServer) -> None:
    url = str(app_server.make_url(""))
    token = await app_server.app[STATE].store.tokens.create("analyst")
    rng = np.random.default_rng(1)
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        clients = []
        for _ in range(8):
            store = LocalStore()
            store.add_many("words", [str(rng.choice(["moon", "sun"]))])
            clients.append(DeviceClient(url, store,
                                        ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=1))))
        fleet = [asyncio.create_task(c.run_forever(stop)) for c in clients]
        res = await _run_query(http, url, SPEC, {"Authorization": f"Bearer {token}"})
        stop.set()
        await asyncio.gather(*fleet)
    assert res["status"] == "succeeded" and res["error"] is None
    std = res["privacy"]["noise"][0]["noise_std_released"]
    assert set(res["uncertainty"]) == {f"/counts/{b}" for b in res["result"]["counts"]} != set()
    for path, u in res["uncertainty"].items():
        value = res["result"]["counts"][path.rsplit("/", 1)[1]]
        lo, hi = u["ci95"]  # released because it reached the threshold: the interval is conditional on that
        assert u["std"] == std and (lo, hi) == pytest.approx(released_interval(value, std, res["result"]["threshold"]))
        assert 0.0 <= lo <= value <= hi <= value + 0.5 + Z95 * std  # selection only pulls it down (½: integer counts)
    # eight devices at ε = 1: a count whose interval is wider than itself is swamped by its noise, and the answer
    # says so with what to change (nearly every count here)
    swamped = {p for p, u in res["uncertainty"].items()
               if u["ci95"][1] - u["ci95"][0] > abs(res["result"]["counts"][p.rsplit("/", 1)[1]])}
    assert {w["path"] for w in res["warnings"]} == swamped != set()
    assert all("privacy.epsilon" in w["message"] for w in res["warnings"])


async def test_a_failed_query_with_a_result_stays_readable(app_server: TestServer) -> None:
    st = app_server.app[STATE].store
    token = await st.tokens.create("analyst")
    info = await st.tokens.lookup(token)
    assert info is not None
    q = await queries_service.submit(st, "training", None, "examples", {"kind": "training"}, {}, 3, None, info.id)
    await queries_service.set_status(st, q.id, "running")
    warnings = [{"path": "/stop_reason", "message": "training diverged at round 2"}]
    assert await queries_service.finish(st, q.id, {"stop_reason": "diverged"}, {"mechanism": "none"}, {}, warnings,
                                 failure="training diverged at round 2: the evaluation loss exploded")
    other = await queries_service.submit(st, "training", None, "examples", {"kind": "training"}, {}, 3, None, info.id)
    await queries_service.set_status(st, other.id, "failed", "no cohort formed")
    hdr = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:
        status = await (await http.get(str(app_server.make_url(f"/v1/queries/{q.id}")), headers=hdr)).json()
        assert status["status"] == "failed" and "diverged" in status["error"]
        r = await http.get(str(app_server.make_url(f"/v1/queries/{q.id}/result")), headers=hdr)
        body = await r.json()
        assert r.status == 200 and body["status"] == "failed" and body["result"] == {"stop_reason": "diverged"}
        assert body["warnings"] == warnings and "exploded" in body["error"]
        r = await http.get(str(app_server.make_url(f"/v1/queries/{other.id}/result")), headers=hdr)
        assert r.status == 409 and "no cohort formed" in (await r.json())["error"]  # failed without a result
        events = [e.type for e in await st.events.of_query(q.id)]
        assert "query.failed" in events and "query.succeeded" not in events
