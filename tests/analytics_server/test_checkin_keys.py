"""Keys with the check-in (docs/protocol.md): a device's secagg public keys sent ahead with its check-in become its
advertise-keys message, and the check-in's answer carries the next phase's message; keys the protocol refuses
leave the device to run the phase itself; malformed keys are a 422 naming the field."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from analytics_server.state import STATE
from device_sdk import ClientOptions, DeviceClient, LocalStore, NetworkOptions
from fa_common.b64 import b64d, b64e
from secagg.client import KeyPairs
from secagg.crypto import keys_payload
from secagg.messages import PeerKeys, decode
from tests.signed_device import SignedDevice

SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
        "cohort": {"min_clients": 3, "max_clients": 4, "phase_timeout_s": 30}}
CHECKIN = "/v1/device/checkin"


async def _post(http: aiohttp.ClientSession, url: str, dev: SignedDevice, path: str, payload: Any,
                sign: bool = True) -> tuple[int, Any]:
    return await dev.post_json(http, url, path, payload, sign)


async def _seated(http: aiohttp.ClientSession, url: str, dev: SignedDevice, keys: dict[str, str]) -> dict[str, Any]:
    for _ in range(100):
        status, body = await _post(http, url, dev, CHECKIN, {"wait_s": 2, "secagg_keys": keys})
        assert status == 200, body
        if body.get("assignment"):
            return body
    raise AssertionError("never seated")


async def test_keys_sent_with_the_checkin(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server: TestServer = await start_app_server(cohort_formation_wait_s=1.0)
    url = str(server.make_url(""))
    st = server.app[STATE]
    hdr = {"Authorization": f"Bearer {await st.store.tokens.create('admin')}"}
    good, low_order = SignedDevice(), SignedDevice()
    pairs = KeyPairs.draw()
    keys = {"c_pk": b64e(pairs.c_pk), "s_pk": b64e(pairs.s_pk),
            "signature": b64e(good.key.sign(keys_payload(pairs.c_pk, pairs.s_pk)))}
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        for d in (good, low_order):
            assert (await _post(http, url, d, "/v1/device/register", {"public_key": b64e(d.public)}))[0] == 201
        for bad in ({"c_pk": "AAAA", "s_pk": keys["s_pk"]}, {"c_pk": keys["c_pk"]}, {**keys, "t_pk": keys["c_pk"]},
                    {**keys, "signature": "AAAA"}):
            status, body = await _post(http, url, good, CHECKIN, {"wait_s": 0, "secagg_keys": bad})
            assert status == 422 and "secagg_keys" in body["error"], body
        others = []
        for rows in (["moon"], ["sun"]):
            store = LocalStore()
            store.add_many("words", rows)
            others.append(DeviceClient(url, store,
                                       ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=1))))
        fleet = [asyncio.create_task(c.run_forever(stop)) for c in others]
        r = await http.post(url + "/v1/queries", json=SPEC, headers=hdr)
        qid = (await r.json())["id"]
        zero = bytes(32)  # a low-order point: its key agreement is all zeros, the session refuses it
        low = {"c_pk": b64e(zero), "s_pk": keys["s_pk"],
               "signature": b64e(low_order.key.sign(keys_payload(zero, pairs.s_pk)))}
        answers = await asyncio.gather(_seated(http, url, good, keys), _seated(http, url, low_order, low))
        (ok, refused) = answers
        assert ok["advertised"] is True and ok["next"]["phase"] == 1, ok
        peer_keys = decode(b64d(ok["next"]["body"], "next.body"))
        assert isinstance(peer_keys, PeerKeys)
        mine = [p for p in peer_keys.peers if p.party == ok["assignment"]["party_id"]]
        assert [(p.c_pk, p.s_pk) for p in mine] == [(pairs.c_pk, pairs.s_pk)]  # relayed as sent
        assert all(p.party != refused["assignment"]["party_id"] for p in peer_keys.peers)  # never advertised
        assert refused["advertised"] is False and "next" not in refused, refused
        for body in (ok, refused):
            path = f"/v1/device/cohorts/{body['assignment']['cohort_id']}/refusal"
            assert (await _post(http, url, good if body is ok else low_order, path, {"reason": "noise_required"}))[0] == 200
        metrics = await (await http.get(url + "/metrics")).text()
        assert re.search(r'^fa_checkin_keys_total\{taken="false"[^}]*\} 1$', metrics, re.M), metrics  # the low-order key
        assert st.metrics.checkin_keys[True] >= 3 and st.metrics.checkin_keys[False] == 1
        await http.post(f"{url}/v1/queries/{qid}/cancel", headers=hdr)
        stop.set()
        await asyncio.gather(*fleet)


async def test_devices_without_a_long_poll_fetch_the_first_message(app_server: TestServer) -> None:
    """A check-in with wait_s 0 is answered before phase 0 closes: the device long-polls for the message."""
    url = str(app_server.make_url("")).rstrip("/")
    st = app_server.app[STATE]
    hdr = {"Authorization": f"Bearer {await st.store.tokens.create('admin')}"}
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        devices = []
        for i in range(3):
            store = LocalStore()
            store.add("words", "moon" if i else "sun")
            devices.append(DeviceClient(url, store,
                                        ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=0))))
        fleet = [asyncio.create_task(d.run_forever(stop)) for d in devices]
        spec = {**SPEC, "cohort": {"min_clients": 3, "max_clients": 3, "phase_timeout_s": 30}}
        qid = (await (await http.post(url + "/v1/queries", json=spec, headers=hdr)).json())["id"]
        for _ in range(400):
            q = await (await http.get(f"{url}/v1/queries/{qid}", headers=hdr)).json()
            if q["status"] not in ("running", "pending"):
                break
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*fleet)
        res = await (await http.get(f"{url}/v1/queries/{qid}/result", headers=hdr)).json()
    assert q["status"] == "succeeded", q
    assert res["result"]["counts"] == {"moon": 2, "sun": 1}, res
