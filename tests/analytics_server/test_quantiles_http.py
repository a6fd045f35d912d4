"""The quantiles kind through the real app in process, over HTTP, with the real device SDK: without noise the
released quantiles, counts and clipped counts are the contributors' own; with the default spec (no `validation`
field) every device proves its contribution, and a device proving more values than allowed is refused when its masked
input arrives, left out, and the query completes with the honest devices' answer.

A test that plays a cheater never races it: `_seat_first` makes cohort formation wait for the cheater (formation sees
no device until the cheater is among them) and keeps the cohort's phases open until every member answered (or their
deadline), so a slow machine cannot form the cohort, or close a phase, without the cheater."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import numpy as np
import pytest

from analytics_server import cohort
from analytics_server.state import STATE, AppState
from device_sdk.client import DeviceClient
from device_sdk.options import ClientOptions, NetworkOptions
from device_sdk.store import LocalStore
from fleet_sim.scenarios.synthetic import startup_rows
from queries.local_run import run_locally
from queries.registry import get_kind
from tests.bent_device import BENT, PROVED, bend

PARAMS = {"features": [{"name": "startup_ms", "lower": 0, "upper": 10000}], "quantiles": [0.5, 0.9, 0.99],
          "max_examples_per_device": 3, "resolution": 256}


def _seat_first(monkeypatch: pytest.MonkeyPatch, st: AppState, first: DeviceClient) -> None:
    """`first` takes part in the first cohort: formation sees no available device until `first` is among them (so the
    first cohort seats it), until `first`'s proof has been refused (it played its part: later cohorts take the others);
    and no phase closes early on stalled arrivals (`cohort.stalled`): each waits for every member it expects, or its
    deadline, so a seated `first` that the machine runs late is waited for instead of dropped."""
    listing = st.store.presence.available

    async def available_devices() -> list[str]:
        devices = await listing()
        if st.metrics.proofs_refused or getattr(first, "device_id", None) in devices:
            return devices
        return []

    monkeypatch.setattr(st.store.presence, "available", available_devices)
    monkeypatch.setattr(cohort, "stalled", lambda *args: False)


async def _run(start_app_server: Any, rows: list[list[Any]], privacy: dict[str, Any] | None,
               seat_first: pytest.MonkeyPatch | None = None,
               ) -> tuple[dict[str, Any], dict[str, Any], list[DeviceClient], Any]:
    """Submits a quantiles query over one device per entry of `rows` and runs it to the end; with `seat_first` (the
    test's monkeypatch) the first device is seated in the cohort (`_seat_first`)."""
    server = await start_app_server(cohort_formation_wait_s=0.0)
    url = str(server.make_url(""))
    st = server.app[STATE]
    hdr = {"Authorization": f"Bearer {await st.store.tokens.create('admin')}"}
    spec: dict[str, Any] = {"kind": "quantiles", "source": "startup", "params": PARAMS,
                            "cohort": {"min_clients": len(rows) - 1, "max_clients": len(rows), "phase_timeout_s": 10}}
    if privacy is not None:
        spec["privacy"] = privacy
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        r = await http.post(url + "/v1/queries", json=spec, headers=hdr)
        assert r.status == 201, await r.text()
        qid = (await r.json())["id"]
        clients = []
        for data in rows:
            store = LocalStore()
            store.add_many("startup", data)
            clients.append(DeviceClient(url, store,
                                        ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=1))))
        if seat_first is not None:
            _seat_first(seat_first, st, clients[0])
        tasks = [asyncio.create_task(c.run_forever(stop)) for c in clients]
        for _ in range(1200):
            status = await (await http.get(f"{url}/v1/queries/{qid}", headers=hdr)).json()
            if status["status"] not in ("pending", "running"):
                break
            await asyncio.sleep(0.1)
        assert status["status"] == "succeeded", status
        res = await (await http.get(f"{url}/v1/queries/{qid}/result", headers=hdr)).json()
        listing = await (await http.get(f"{url}/v1/admin/queries/{qid}/contributors", headers=hdr)).json()
        stop.set()
        await asyncio.gather(*tasks)
    return res, listing, clients, st


async def test_without_noise_the_answer_is_the_contributors_own(start_app_server: Any) -> None:
    rng = np.random.default_rng(11)
    rows = [startup_rows(rng) for _ in range(12)] + [[{"startup_ms": 25000.0}, {"startup_ms": -3.0}]]
    res, listing, clients, _ = await _run(start_app_server, rows, {"mechanism": "none", "validation": "none"})
    by_id = {c.device_id: r for c, r in zip(clients, rows)}
    expected, _ = run_locally(get_kind("quantiles"), PARAMS, [by_id[d] for d in listing["rounds"]["0"]])
    assert res["result"] == expected
    f = res["result"]["features"]["startup_ms"]
    assert f["clipped_above"] >= 1 and f["clipped_below"] == (1 if clients[-1].device_id in listing["rounds"]["0"] else 0)


@pytest.mark.parametrize("attack", ["vote_1000", "vote_twice"])
async def test_with_the_default_spec_a_device_proving_a_bent_tree_is_refused_and_left_out(
        start_app_server: Any, monkeypatch: pytest.MonkeyPatch, attack: str) -> None:
    """vote_1000: a count of 1,000 values where 3 are allowed (a range broken); vote_twice: a root and one level-1
    node of 1, the deeper levels empty (every entry in range, the levels no longer adding up to the root)."""
    bend(monkeypatch)
    rng = np.random.default_rng(12)
    honest = [startup_rows(rng) for _ in range(6)]
    # the cheater is the first device: formation waits for it
    res, listing, clients, st = await _run(start_app_server, [[BENT + attack + PROVED, {"startup_ms": 1.0}]] + honest,
                                           None, seat_first=monkeypatch)
    cheater = clients[0].device_id
    cohorts = {c.id: (c.status, c.reason, sorted(c.members)) for c in st.orchestrator.cohorts.values()}
    assert any(cheater in members for _, _, members in cohorts.values()), ("the cheater was never seated", cheater, cohorts)
    assert res["privacy"]["validation"] == "proofs" and res["privacy"]["devices_excluded"] == 1, (
        attack, listing, st.metrics.proofs_refused, cheater, cohorts)
    assert st.metrics.proofs_refused >= 1
    assert list(listing["excluded"]) == [cheater] and all(cheater not in ids for ids in listing["rounds"].values())
    by_id = {c.device_id: r for c, r in zip(clients[1:], honest)}
    expected, _ = run_locally(get_kind("quantiles"), PARAMS, [by_id[d] for d in listing["rounds"]["0"]])
    assert res["result"] == expected
