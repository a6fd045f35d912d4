"""The device-side randomness factory: OS by default, reproducible when seeded, independent sub-sources."""

from __future__ import annotations

import numpy as np

from analytics_server.auth import NONCE_RE
from device_sdk.client import DeviceClient
from device_sdk.options import ClientOptions, NetworkOptions
from device_sdk.randomness import DeviceRandomness
from fleet_sim.simulator import device_randomness, make_devices
from device_sdk.store import LocalStore
from secagg.randomness import OsRandom, SeededRandom
from tests.device_sdk.test_client import wait_ended


def _fingerprint(r: DeviceRandomness, cohort: str) -> tuple[bytes, bytes, tuple[int, ...]]:
    c = r.for_contribution(cohort)
    return c.secagg.bytes(32), c.noise.bytes(32), tuple(int(x) for x in c.kind.integers(0, 1 << 62, 4))


def test_default_is_os_entropy():
    r = DeviceRandomness()
    assert isinstance(r.root, OsRandom)
    assert r.identity_key() != r.identity_key()
    assert _fingerprint(r, "c1") != _fingerprint(r, "c1")
    nonces = {r.nonce() for _ in range(200)}
    assert len(nonces) == 200 and all(NONCE_RE.match(n) and len(n) == 22 for n in nonces)


def test_seeded_factory_is_reproducible_per_cohort_and_independent_across():
    a, b = DeviceRandomness(SeededRandom(b"dev")), DeviceRandomness(SeededRandom(b"dev"))
    assert a.identity_key() == b.identity_key()
    assert [a.nonce() for _ in range(5)] == [b.nonce() for _ in range(5)]
    b.for_contribution("other")  # order of contributions does not matter
    assert _fingerprint(a, "c1") == _fingerprint(b, "c1")
    secagg, noise, kind = _fingerprint(a, "c1")
    assert len({secagg, noise}) == 2
    assert _fingerprint(a, "c2")[0] != secagg and _fingerprint(a, "c2")[1] != noise
    assert _fingerprint(DeviceRandomness(SeededRandom(b"dev2")), "c1")[0] != secagg


def test_device_client_takes_its_key_and_nonces_from_the_injected_source():
    one = DeviceClient("http://127.0.0.1:9", LocalStore(), ClientOptions(randomness=SeededRandom(b"client")))
    two = DeviceClient("http://127.0.0.1:9", LocalStore(), ClientOptions(randomness=SeededRandom(b"client")))
    assert one.device_id == two.device_id
    assert one.randomness.nonce() == two.randomness.nonce()
    three = DeviceClient("http://127.0.0.1:9", LocalStore())
    assert three.device_id != one.device_id


def test_simulated_fleet_is_os_by_default_and_reproducible_when_asked():
    os_keys = {k for k, _ in make_devices(3, "words", seed=1)} | {k for k, _ in make_devices(3, "words", seed=1)}
    assert len(os_keys) == 6 and device_randomness(next(iter(os_keys)), False) is None
    seeded = make_devices(3, "words", seed=1, seeded_randomness=True)
    assert seeded == make_devices(3, "words", seed=1, seeded_randomness=True)
    assert len({k for k, _ in seeded}) == 3
    roots = [device_randomness(k, True) for k, _ in seeded]
    assert roots[0] is not None and roots[0].bytes(8) == device_randomness(seeded[0][0], True).bytes(8)
    assert np.unique([r.bytes(8) for r in roots if r is not None]).size == 3


async def test_a_seeded_device_masks_and_signs_with_the_factorys_sub_sources(app_server) -> None:  # type: ignore[no-untyped-def]
    """Against the real app: the keys a device advertises and the nonces it signs with come from its factory."""
    import asyncio

    import aiohttp

    import json

    from analytics_server.state import STATE
    from fa_common.b64 import b64d
    from secagg import crypto
    from secagg.messages import AdvertiseKeys, decode

    url = str(app_server.make_url(""))
    token = await app_server.app[STATE].store.tokens.create("analyst")
    spec = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
            "cohort": {"min_clients": 5, "max_clients": 50, "phase_timeout_s": 3}}
    sent: dict[int, list[tuple[str, bytes]]] = {}
    nonces: dict[int, list[str]] = {}

    class Recording(DeviceClient):
        index = 0

        async def request(self, method, path, body=b"", *args, **kwargs):  # type: ignore[no-untyped-def]
            sent.setdefault(self.index, []).append((path, body))
            return await super().request(method, path, body, *args, **kwargs)

    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        clients = []
        for i in range(6):
            store = LocalStore()
            store.add_many("words", ["moon"])
            c = Recording(url, store, ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=1),
                                          randomness=SeededRandom(b"device/%d" % i)))
            c.index = i
            draw = c.randomness.nonce

            def recorded_nonce(i: int = i, draw=draw) -> str:  # type: ignore[no-untyped-def]
                nonces.setdefault(i, []).append(draw())
                return nonces[i][-1]

            c.randomness.nonce = recorded_nonce  # type: ignore[method-assign]
            clients.append(c)
        fleet = [asyncio.create_task(c.run_forever(stop)) for c in clients]
        hdr = {"Authorization": f"Bearer {token}"}
        r = await http.post(url + "/v1/queries", json=spec, headers=hdr)
        qid = (await r.json())["id"]
        status = await wait_ended(http, url, qid, hdr)
        stop.set()
        await asyncio.gather(*fleet)
    assert status["status"] == "succeeded", status
    for i in range(6):
        expected = DeviceRandomness(SeededRandom(b"device/%d" % i))
        assert nonces[i] == [expected.nonce() for _ in nonces[i]] and len(nonces[i]) == len(sent[i])
        # keys sent ahead with check-ins: one fresh pair per check-in, from the factory's check-in stream
        checkin_keys = [json.loads(b)["secagg_keys"] for p, b in sent[i] if p == "/v1/device/checkin"]
        stream = expected.checkin_keys()
        for keys in checkin_keys:
            assert b64d(keys["c_pk"], "c_pk") == crypto.x25519_public_of(stream.bytes(32))
            assert b64d(keys["s_pk"], "s_pk") == crypto.x25519_public_of(stream.bytes(32))
        adverts = [(p, b) for p, b in sent[i] if p.endswith("/phases/0")]
        assert checkin_keys or adverts, f"device {i} never advertised keys"
        for path, body in adverts:  # a first phase run by the device itself draws from the contribution's stream
            msg = decode(body)
            assert isinstance(msg, AdvertiseKeys)
            stream = expected.for_contribution(path.split("/")[4]).secagg
            assert msg.c_pk == crypto.x25519_public_of(stream.bytes(32))
            assert msg.s_pk == crypto.x25519_public_of(stream.bytes(32))
