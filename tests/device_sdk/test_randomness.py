"""The device-side randomness factory: OS by default, reproducible when seeded, independent sub-sources."""

from __future__ import annotations

import numpy as np

from analytics_server.auth import NONCE_RE
from device_sdk.client import DeviceClient
from device_sdk.randomness import DeviceRandomness
from device_sdk.simulator import device_randomness, make_devices
from device_sdk.store import LocalStore
from secagg.randomness import OsRandom, SeededRandom


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
    one = DeviceClient("http://127.0.0.1:9", LocalStore(), randomness=SeededRandom(b"client"))
    two = DeviceClient("http://127.0.0.1:9", LocalStore(), randomness=SeededRandom(b"client"))
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
