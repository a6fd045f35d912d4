"""`POST /v1/device/cohorts/{cohort}/refusal`: bad input gets a 4xx naming what is wrong; a member's refusal is
counted once by reason in /metrics and the cohort stops waiting for it (the query finishes without it)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from analytics_server.state import STATE
from device_sdk import ClientOptions, DeviceClient, LocalStore, NetworkOptions
from fa_common.b64 import b64e
from queries.envelope import MAX_REFUSAL_DETAIL
from tests.signed_device import SignedDevice

SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
        "cohort": {"min_clients": 2, "max_clients": 3, "phase_timeout_s": 30}}


async def _post(http: aiohttp.ClientSession, url: str, dev: SignedDevice, path: str, payload: Any,
                sign: bool = True) -> tuple[int, Any]:
    return await dev.post_json(http, url, path, payload, sign)


async def test_refusal_route(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server: TestServer = await start_app_server(cohort_formation_wait_s=1.0)
    url = str(server.make_url(""))
    st = server.app[STATE]
    hdr = {"Authorization": f"Bearer {await st.store.tokens.create('admin')}"}
    hand, stranger = SignedDevice(), SignedDevice()
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        for d in (hand, stranger):
            assert (await _post(http, url, d, "/v1/device/register", {"public_key": b64e(d.public)}))[0] == 201
        others = []
        for rows in (["moon"], ["sun"]):
            store = LocalStore()
            store.add_many("words", rows)
            others.append(DeviceClient(url, store,
                                       ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=1))))
        fleet = [asyncio.create_task(c.run_forever(stop)) for c in others]
        r = await http.post(url + "/v1/queries", json=SPEC, headers=hdr)
        qid = (await r.json())["id"]
        assignment = None
        while assignment is None:  # the hand-driven device checks in until it is seated
            status, body = await _post(http, url, hand, "/v1/device/checkin", {"wait_s": 2})
            assert status == 200, body
            assignment = body.get("assignment")
        path = f"/v1/device/cohorts/{assignment['cohort_id']}/refusal"
        assert assignment["privacy"]["mechanism"] == "none" and assignment["privacy"]["rounds"] == 1
        status, body = await _post(http, url, hand, path, {"reason": "noise_required", "detail": "app policy"})
        assert (status, body) == (200, {"recorded": True, "reason": "noise_required"})

        status, body = await _post(http, url, hand, path, {"reason": "because"})
        assert status == 422 and "reason" in body["error"]
        status, body = await _post(http, url, hand, path, {"reason": "noise_required", "detail": "x" * (MAX_REFUSAL_DETAIL + 1)})
        assert status == 422 and "detail" in body["error"]
        status, body = await _post(http, url, hand, path, {"reason": "noise_required", "extra": 1})
        assert status == 422 and "extra" in body["error"]
        status, body = await _post(http, url, hand, path, b"{not json")
        assert status == 400
        status, body = await _post(http, url, stranger, path, {"reason": "noise_required"})
        assert status == 403 and "not a member" in body["error"]
        status, body = await _post(http, url, hand, path, {"reason": "noise_required"}, sign=False)
        assert status == 401
        status, body = await _post(http, url, hand, "/v1/device/cohorts/" + "0" * 32 + "/refusal", {"reason": "noise_required"})
        assert status == 404
        status, body = await _post(http, url, hand, path, {"reason": "noise_required"})
        assert (status, body) == (200, {"recorded": False, "reason": "noise_required"})
        assert st.metrics.refusals["noise_required"] == 1
        text = await (await http.get(url + "/metrics")).text()
        assert 'fa_device_refusals_total{reason="noise_required"' in text and 'reason="epsilon_per_day"' in text

        for _ in range(200):  # the 30 s phase deadline is not what ends the cohort: the refuser is not waited for
            q = await (await http.get(f"{url}/v1/queries/{qid}", headers=hdr)).json()
            if q["status"] != "running" and q["status"] != "pending":
                break
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*fleet)
    assert q["status"] == "succeeded", q
    assert st.metrics.early_closes == 0  # every phase closed on its last expected answer: nobody waited for the refuser
    contributors = await st.store.rounds.contributors(qid)
    assert hand.device_id not in contributors[0] and len(contributors[0]) == 2
