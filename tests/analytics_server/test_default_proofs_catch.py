"""With the default spec (no `validation` field) the server asks every device for a proof, for every kind: a device
that proves its bent vector (two votes where one is allowed) is refused when its masked input arrives, left out of
the rest of the query, and the query completes with the honest devices' result — histogram and heavy hitters here
(feature_stats: test_feature_stats_proofs.py; clipped updates: test_training_proofs.py; sign votes: the SDK's
statements in tests/secagg)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import numpy as np
import pytest

from analytics_server.state import STATE
from device_sdk.client import DeviceClient
from device_sdk.store import LocalStore
from queries.local_run import run_locally
from queries.registry import get_kind
from tests.bent_device import BENT, PROVED, bend

WORDS = ["moon", "sun", "star"]
SPECS: dict[str, dict[str, Any]] = {
    "histogram": {"kind": "histogram", "source": "words", "params": {"buckets": WORDS}},
    "heavy_hitters": {"kind": "heavy_hitters", "source": "words",
                      "params": {"mode": "secagg", "max_length": 3, "alphabet": "mnorstu", "max_frontier": 4}},
}


@pytest.mark.parametrize("kind", sorted(SPECS))
async def test_a_device_proving_two_votes_is_refused_and_left_out(
        start_app_server: Any, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    bend(monkeypatch)
    server = await start_app_server(cohort_formation_wait_s=0.0)
    url = str(server.make_url(""))
    st = server.app[STATE]
    hdr = {"Authorization": f"Bearer {await st.store.create_token('admin')}"}
    rng = np.random.default_rng(5)
    honest = [[str(w) for w in rng.choice(WORDS, size=2)] for _ in range(4)]
    spec = {**SPECS[kind], "cohort": {"min_clients": 4, "max_clients": 5, "phase_timeout_s": 5}}
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        r = await http.post(f"{url}/v1/queries", json=spec, headers=hdr)
        assert r.status == 201, await r.text()
        qid = (await r.json())["id"]
        clients = []
        for rows in honest + [[BENT + "vote_twice" + PROVED, "moon", "sun"]]:
            store = LocalStore()
            store.add_many("words", rows)
            clients.append(DeviceClient(url, store, session=http, checkin_wait_s=1))
        tasks = [asyncio.create_task(c.run_forever(stop)) for c in clients]
        for _ in range(900):
            status = await (await http.get(f"{url}/v1/queries/{qid}", headers=hdr)).json()
            if status["status"] not in ("pending", "running"):
                break
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*tasks)
        assert status["status"] == "succeeded", status
        res = await (await http.get(f"{url}/v1/queries/{qid}/result", headers=hdr)).json()
        listing = await (await http.get(f"{url}/v1/admin/queries/{qid}/contributors", headers=hdr)).json()
    cheater = clients[-1].device_id
    assert res["privacy"]["validation"] == "proofs"  # the server's default
    assert st.metrics.proofs_refused >= 1 and st.metrics.cheating_detected == 0
    assert list(listing["excluded"]) == [cheater] and listing["excluded"][cheater].startswith("validity proof refused")
    assert res["privacy"]["devices_excluded"] == 1
    assert all(cheater not in ids for ids in listing["rounds"].values())
    rows = {c.device_id: r for c, r in zip(clients, honest)}
    if kind == "histogram":
        expected, _ = run_locally(get_kind(kind), spec["params"], [rows[d] for d in listing["rounds"]["0"]])
        assert res["result"] == expected
