"""Identity tokens over real HTTP against the real app (in process), docs/identities.md.

A server that trusts an issuer registers only keys that issuer vouched for, and refuses by name everything else;
devices enrol (their token is kept in the store) and an honest cohort of them releases the exact histogram. The
attack: a server that also trusts an issuer of its own (it can mint identities at will) seats five of its own
beside one real device; the real device, pinning the real issuer's key, counts only itself among its neighbours and
refuses (`unsafe_parameters`) before it encrypts any share, so nothing is released.

The issuer here is a stand-in of a few lines (`IssuerStub`: blind signatures with no credential checks or quota);
the real `fa-issuer` and its checks are tested in tests/fa_issuer/.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from analytics_server.state import STATE
from device_sdk import ClientOptions, DeviceClient, DevicePolicy, Enrolment, EnrolmentError, LocalStore, NetworkOptions
from device_sdk.client import ServerError
from device_sdk.identity import TOKEN_META
from secagg import blind_rsa, identity_token
from tests.device_sdk.fleet import Fleet, analyst, metric, run_query

WORDS = [["moon"], ["sun", "moon"], ["star"], ["moon"], ["sun"], ["moon", "star"]]
SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
        "cohort": {"min_clients": 6, "max_clients": 6, "phase_timeout_s": 4}}


@cache
def _key(name: str) -> RSAPrivateKey:
    return blind_rsa.generate_key()


def spki(name: str) -> str:
    return base64.b64encode(blind_rsa.public_key_der(_key(name).public_key())).decode()


@dataclass
class IssuerStub:
    url: str
    name: str
    refuse: str | None = None


@pytest.fixture
async def issuers() -> AsyncIterator[dict[str, IssuerStub]]:
    """Two stand-in issuers: "real" (the one apps pin) and "rogue" (one a malicious server runs for itself)."""
    servers, out = [], {}
    for name in ("real", "rogue"):
        stub = IssuerStub("", name)

        async def keys(_: web.Request, name: str = name) -> web.Response:
            key_id = identity_token.key_id(_key(name).public_key())
            return web.json_response({"token_type": 2, "keys": [{"token_key_id": base64.b64encode(key_id).decode(),
                                                                 "public_key": spki(name)}]})

        async def token(request: web.Request, name: str = name, stub: IssuerStub = stub) -> web.Response:
            if stub.refuse:
                return web.json_response({"error": stub.refuse}, status=429, headers={"Retry-After": "3600"})
            body = await request.json()
            sig = blind_rsa.blind_sign(_key(name), base64.b64decode(body["blinded_msg"]))
            return web.json_response({"blind_sig": base64.b64encode(sig).decode(), "remaining": 0})

        app = web.Application()
        app.router.add_get("/v1/issuer/keys", keys)
        app.router.add_post("/v1/issuer/token", token)
        server = TestServer(app)
        await server.start_server()
        servers.append(server)
        stub.url = str(server.make_url("")).rstrip("/")
        out[name] = stub
    yield out
    for server in servers:
        await server.close()


async def _register(url: str, http: aiohttp.ClientSession, token: bytes | None, client: DeviceClient | None = None,
                    ) -> tuple[int, Any]:
    client = client or DeviceClient(url, LocalStore(), ClientOptions(network=NetworkOptions(session=http)))
    payload: dict[str, Any] = {"public_key": base64.b64encode(client.public_key).decode()}
    if token is not None:
        payload["identity_token"] = base64.b64encode(token).decode()
    return await client._json("POST", "/v1/device/register", payload, register=True)


def _token_for(name: str, identity: bytes) -> bytes:
    pending = identity_token.request(_key(name).public_key(), identity)
    return pending.finalize(blind_rsa.blind_sign(_key(name), pending.blinded_msg)).encode()


async def test_registration_needs_a_token_the_trusted_issuer_signed_for_that_key(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server(issuer_keys=spki("real"))
    url = str(server.make_url(""))
    async with aiohttp.ClientSession() as http:
        device = DeviceClient(url, LocalStore(), ClientOptions(network=NetworkOptions(session=http)))
        other = DeviceClient(url, LocalStore(), ClientOptions(network=NetworkOptions(session=http)))
        cases = [
            (None, 403, "identity_token: this server admits only devices an identity issuer vouched for"),
            (_token_for("rogue", device.public_key), 403, "identity_token: the token was signed by an issuer key this"),
            (_token_for("real", other.public_key), 403, "identity_token: the token vouches for another identity key"),
            (b"\x00" * 10, 422, "identity_token"),
        ]
        for token, status, message in cases:
            got, body = await _register(url, http, token, device)
            assert (got, body["error"][:len(message)]) == (status, message), body
        assert await server.app[STATE].store.devices.key(device.device_id) is None  # nothing stored
        got, body = await _register(url, http, _token_for("real", device.public_key), device)
        assert got == 201 and body["device_id"] == device.device_id
        assert (await server.app[STATE].store.devices.identity(device.device_id))[1] is not None


async def test_a_device_registered_before_the_issuer_must_register_again_with_a_token(start_app_server) -> None:  # type: ignore[no-untyped-def]
    before = await start_app_server()
    async with aiohttp.ClientSession() as http:
        device = DeviceClient(str(before.make_url("")), LocalStore(),
                              ClientOptions(network=NetworkOptions(session=http)))
        assert (await _register(str(before.make_url("")), http, None, device))[0] == 201
        await before.close()
        after = await start_app_server(issuer_keys=spki("real"))
        url = str(after.make_url(""))
        device.servers = [url]
        status, body = await device._json("POST", "/v1/device/checkin", {"wait_s": 0})
        assert status == 403 and "registered without an identity token" in body["error"], body
        assert (await _register(url, http, _token_for("real", device.public_key), device))[0] == 201
        assert (await device._json("POST", "/v1/device/checkin", {"wait_s": 0}))[0] == 200


async def test_enrolled_devices_release_the_exact_histogram_and_keep_their_token(start_app_server, issuers) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server(issuer_url=issuers["real"].url)  # keys read from the issuer at start
    url = str(server.make_url(""))
    hdr = await analyst(server)
    policy = DevicePolicy(issuer_keys=[spki("real")], min_cohort=6)
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        devices = [fleet.add(rows, policy, enrolment=Enrolment(issuers["real"].url, f"install-{i}"))
                   for i, rows in enumerate(WORDS)]
        final = await run_query(http, url, SPEC, hdr)
        await fleet.stop()
    assert final["status"] == "succeeded", final
    assert final["result"]["result"]["counts"] == {"moon": 4, "sun": 1, "star": 1}  # one vote per device
    assert final["result"]["privacy"]["identities"] == "issuer"
    for dev in devices:
        kept = base64.b64decode(dev.store.get_meta(TOKEN_META))
        identity_token.verify(kept, dev.client.public_key, policy.trusted_issuers)


async def test_a_demo_server_without_an_issuer_says_its_registration_is_open(start_app_server) -> None:  # type: ignore[no-untyped-def]
    """The demo profile without an issuer admits bare keys (design's `fa-server serve` + `fa-sim --server URL`),
    and says so where an analyst looks: /healthz and the released privacy block (rendered by `fa` and the console)."""
    server = await start_app_server()
    url = str(server.make_url(""))
    hdr = await analyst(server)
    async with aiohttp.ClientSession() as http:
        assert (await (await http.get(url + "/healthz")).json())["identities"] == "open"
        fleet = Fleet(server, http)
        for rows in WORDS:
            fleet.add(rows, DevicePolicy())
        final = await run_query(http, url, SPEC, hdr)
        await fleet.stop()
    assert final["status"] == "succeeded", final
    assert final["result"]["privacy"]["identities"] == "open"
    from analyst_client.view import privacy_words

    assert "identities: OPEN registration" in privacy_words(final["result"])


async def test_a_server_with_an_issuer_reports_it(start_app_server, issuers) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server(profile="production", issuer_keys=spki("real"))
    async with aiohttp.ClientSession() as http:
        assert (await (await http.get(str(server.make_url("/healthz")))).json())["identities"] == "issuer"


async def test_members_a_server_minted_for_itself_do_not_count(start_app_server, issuers) -> None:  # type: ignore[no-untyped-def]
    """The server trusts its own issuer beside the real one; five of its identities and one real device form the
    cohort. The real device verifies every signature but only its own token: 1 of its 6 neighbours holds a token from
    the issuer it pins, below the share threshold, so it refuses (`unsafe_parameters`) before any share is encrypted
    — before it would count its cohort against `min_cohort` (`cohort_unverified`)."""
    server = await start_app_server(issuer_keys=f"{spki('real')},{spki('rogue')}", max_consecutive_aborts=1)
    url = str(server.make_url(""))
    hdr = await analyst(server)
    async with aiohttp.ClientSession() as http:
        fleet = Fleet(server, http)
        for i, rows in enumerate(WORDS[:5]):
            fleet.add(rows, DevicePolicy(), enrolment=Enrolment(issuers["rogue"].url, f"made-up-{i}"))
        victim = fleet.add(WORDS[5], DevicePolicy(issuer_keys=[spki("real")], min_cohort=6),
                           enrolment=Enrolment(issuers["real"].url, "real-install"))
        final = await run_query(http, url, SPEC, hdr)
        await fleet.stop()
        assert await metric(http, url, "fa_device_refusals_total", 'reason="unsafe_parameters"') == 1
    assert final["status"] == "failed" and "unsafe_parameters" in final["error"], final
    (record,) = victim.client.transparency_log()
    assert record.status == "refused" and record.sent_at is None
    assert "threshold: 1 of this party's 6 neighbours (itself included) hold a valid issuer token, below the share " \
           "threshold" in record.detail, record.detail


async def test_an_issuer_refusal_reaches_the_app_with_its_message(start_app_server, issuers) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server(issuer_keys=spki("real"))
    issuers["real"].refuse = "quota spent: 1 token per install per day"
    async with aiohttp.ClientSession() as http:
        device = DeviceClient(str(server.make_url("")), LocalStore(),
                              ClientOptions(enrolment=Enrolment(issuers["real"].url, "install"),
                                            network=NetworkOptions(session=http)))
        with pytest.raises(EnrolmentError, match="HTTP 429: quota spent") as info:
            await device.ensure_registered()
        assert info.value.retry_after == 3600
        plain = DeviceClient(str(server.make_url("")), LocalStore(),
                             ClientOptions(network=NetworkOptions(session=http)))
        with pytest.raises(ServerError, match="this device has no enrolment"):
            await plain.ensure_registered()


async def test_a_refused_enrolment_is_retried_after_the_issuers_wait_without_a_traceback(  # type: ignore[no-untyped-def]
        start_app_server, issuers, monkeypatch, caplog) -> None:
    """`run_forever` treats the issuer's refusal as it treats the server's: one warning line, and no next try
    before the issuer's Retry-After (here an hour; the device's rest is recorded, not slept)."""
    server = await start_app_server(issuer_keys=spki("real"))
    issuers["real"].refuse = "too many token requests from this address; retry later"
    rests: list[float] = []
    stop = asyncio.Event()

    async def rest(event: asyncio.Event, seconds: float) -> None:
        rests.append(seconds)
        stop.set()

    monkeypatch.setattr("device_sdk.client._sleep", rest)
    device = DeviceClient(str(server.make_url("")), LocalStore(),
                          ClientOptions(enrolment=Enrolment(issuers["real"].url, "install")))
    with caplog.at_level(logging.WARNING, logger="device_sdk"):
        await asyncio.wait_for(device.run_forever(stop), 60)
    await device.close()
    assert rests == [3600], rests
    (record,) = [r for r in caplog.records if "identity issuer" in r.getMessage()]
    assert record.levelno == logging.WARNING and record.exc_info is None, record.getMessage()
    assert "HTTP 429: too many token requests" in record.getMessage()


def test_pinned_issuer_keys_are_checked_when_the_policy_is_made() -> None:
    from device_sdk import PolicyError

    with pytest.raises(PolicyError, match=r"issuer_keys\[0\]: not an issuer public key"):
        DevicePolicy(issuer_keys=["bm90IGEga2V5"])
    with pytest.raises(PolicyError, match="a list of base64"):
        DevicePolicy(issuer_keys=spki("real"))  # type: ignore[arg-type]
    policy = DevicePolicy(issuer_keys=[spki("real")])
    identity = b"\x07" * 32
    assert policy.credentialed(identity, _token_for("real", identity))
    assert not policy.credentialed(identity, _token_for("rogue", identity))
    assert not policy.credentialed(b"\x08" * 32, _token_for("real", identity))
