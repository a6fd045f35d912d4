"""The issuer's HTTP routes in process (aiohttp's test server): tokens that finalize and verify, the quota under
concurrency, and a 4xx naming the field for every kind of bad input, never a 5xx."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from nacl.signing import SigningKey

from fa_issuer import app as issuer_app
from fa_common.ratelimit import AddressRateLimiter
from fa_issuer.keys import IssuerKey
from secagg import blind_rsa, identity_token
from secagg.randomness import OsRandom
from tests.fa_issuer.conftest import IssuerFactory, credential

IDENTITY = bytes(range(32))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def token_body(key: IssuerKey, cred: str, identity: bytes = IDENTITY) -> tuple[dict[str, Any], identity_token.PendingToken]:
    pending = identity_token.request(key.public, identity, OsRandom())
    return {"credential": cred, "token_key_id": b64(pending.token_key_id), "blinded_msg": b64(pending.blinded_msg)}, pending


async def published_keys(client: TestClient[Any, Any]) -> dict[bytes, Any]:
    resp = await client.get("/v1/issuer/keys")
    assert resp.status == 200
    body = await resp.json()
    assert body["token_type"] == 2
    keys = {}
    for entry in body["keys"]:
        der = base64.b64decode(entry["public_key"])
        assert base64.b64decode(entry["token_key_id"]) == hashlib.sha256(der).digest()
        keys[base64.b64decode(entry["token_key_id"])] = blind_rsa.load_public_key(der)
    return keys


async def test_a_token_finalizes_and_verifies_with_the_published_key(start_issuer: IssuerFactory,
                                                                      issuer_key: IssuerKey, app_key: SigningKey) -> None:
    client, _ = await start_issuer(tokens_per_day=2)
    keys = await published_keys(client)
    assert list(keys) == [issuer_key.token_key_id]
    body, pending = token_body(issuer_key, credential(app_key, "install-1"))
    resp = await client.post("/v1/issuer/token", json=body)
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    assert answer["remaining"] == 1
    token = pending.finalize(base64.b64decode(answer["blind_sig"]))
    assert identity_token.verify(token.encode(), IDENTITY, keys) == token
    with pytest.raises(identity_token.TokenError):
        identity_token.verify(token.encode(), bytes(32), keys)
    health = await client.get("/healthz")
    assert health.status == 200 and (await health.json())["status"] == "ok"


async def test_the_quota_refuses_with_its_numbers(start_issuer: IssuerFactory, issuer_key: IssuerKey,
                                                  app_key: SigningKey) -> None:
    client, _ = await start_issuer(tokens_per_day=1)
    cred = credential(app_key, "install-q")
    first = await client.post("/v1/issuer/token", json=token_body(issuer_key, cred)[0])
    assert first.status == 200 and (await first.json())["remaining"] == 0
    second = await client.post("/v1/issuer/token", json=token_body(issuer_key, cred)[0])
    assert second.status == 429
    message = (await second.json())["error"]
    assert message.startswith("quota spent") and "1 of its 1 token(s) per 24 hours" in message
    assert 86000 < int(second.headers["Retry-After"]) <= 86400
    other = await client.post("/v1/issuer/token", json=token_body(issuer_key, credential(app_key, "install-r"))[0])
    assert other.status == 200


async def test_parallel_requests_never_exceed_the_quota(start_issuer: IssuerFactory, issuer_key: IssuerKey,
                                                        app_key: SigningKey) -> None:
    client, issuer = await start_issuer(tokens_per_day=3)
    cred = credential(app_key, "install-p")
    bodies = [token_body(issuer_key, cred)[0] for _ in range(40)]

    async def post(body: dict[str, Any]) -> int:
        resp = await client.post("/v1/issuer/token", json=body)
        await resp.read()
        return resp.status

    statuses = await asyncio.gather(*(post(b) for b in bodies))
    assert sorted(statuses) == [200] * 3 + [429] * 37
    assert issuer.quota.used("notes", "install-p", issuer.clock.time()) == 3


async def test_the_database_holds_no_blinded_message_or_signature(start_issuer: IssuerFactory, issuer_key: IssuerKey,
                                                                  app_key: SigningKey, tmp_path: Path) -> None:
    client, issuer = await start_issuer()
    body, _ = token_body(issuer_key, credential(app_key, "install-s"))
    resp = await client.post("/v1/issuer/token", json=body)
    sig = base64.b64decode((await resp.json())["blind_sig"])
    issuer.quota.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("issuer-0.db*"))
    assert b"install-s" in stored  # the record is there …
    for secret in (base64.b64decode(body["blinded_msg"]), sig):  # … and nothing that links to a token
        assert secret[:16] not in stored and secret[-16:] not in stored


@pytest.mark.parametrize("install, valid_s, app, reason", [
    ("i", -10, "notes", "credential refused: expired"),
    ("i", 3600, "calendar", "credential refused: unknown app 'calendar'"),
])
async def test_refused_credentials(start_issuer: IssuerFactory, issuer_key: IssuerKey, app_key: SigningKey,
                                   install: str, valid_s: float, app: str, reason: str) -> None:
    client, _ = await start_issuer()
    resp = await client.post("/v1/issuer/token", json=token_body(issuer_key, credential(app_key, install, valid_s, app))[0])
    assert resp.status == 403
    assert (await resp.json())["error"].startswith(reason)


async def test_a_credential_from_another_key_is_refused(start_issuer: IssuerFactory, issuer_key: IssuerKey) -> None:
    client, _ = await start_issuer()
    stranger = SigningKey(bytes(32))
    resp = await client.post("/v1/issuer/token", json=token_body(issuer_key, credential(stranger, "i"))[0])
    assert resp.status == 403
    assert (await resp.json())["error"].startswith("credential refused: bad signature")


async def test_an_unknown_token_key_id_is_404(start_issuer: IssuerFactory, issuer_key: IssuerKey,
                                              app_key: SigningKey) -> None:
    client, _ = await start_issuer()
    body, _ = token_body(issuer_key, credential(app_key, "i"))
    resp = await client.post("/v1/issuer/token", json={**body, "token_key_id": b64(bytes(32))})
    assert resp.status == 404
    assert "token_key_id" in (await resp.json())["error"]


def _fields(issuer_key: IssuerKey, app_key: SigningKey) -> dict[str, Any]:
    return token_body(issuer_key, credential(app_key, "i"))[0]


@pytest.mark.parametrize("change, field", [
    ({"credential": None}, "credential"),
    ({"credential": 7}, "credential"),
    ({"token_key_id": None}, "token_key_id"),
    ({"token_key_id": "%%%"}, "token_key_id"),
    ({"token_key_id": b64(bytes(31))}, "token_key_id"),
    ({"token_key_id": ["x"]}, "token_key_id"),
    ({"blinded_msg": None}, "blinded_msg"),
    ({"blinded_msg": "not base64!"}, "blinded_msg"),
    ({"blinded_msg": b64(bytes(255))}, "blinded_msg"),
    ({"blinded_msg": b64(bytes(300))}, "blinded_msg"),
    ({"blinded_msg": b64(b"\xff" * 256)}, "blinded_msg"),  # not below the modulus
    ({"extra": 1}, "extra"),
])
async def test_a_field_that_does_not_parse_is_422_naming_it(start_issuer: IssuerFactory, issuer_key: IssuerKey,
                                                             app_key: SigningKey, change: dict[str, Any], field: str) -> None:
    client, issuer = await start_issuer()
    body = {k: v for k, v in {**_fields(issuer_key, app_key), **change}.items() if v is not None}
    resp = await client.post("/v1/issuer/token", json=body)
    assert resp.status == 422, await resp.text()
    answer = await resp.json()
    assert answer["error"].startswith(f"{field}: ")
    assert answer["detail"][0]["field"] == field
    assert issuer.quota.used("notes", "i", issuer.clock.time()) == 0  # nothing charged


@pytest.mark.parametrize("data, headers, status", [
    (b"x" * 5000, {"Content-Type": "application/json"}, 413),
    (b"{}", {"Content-Type": "text/plain"}, 415),
    (b"{", {"Content-Type": "application/json"}, 400),
    (b"\xff\xfe", {"Content-Type": "application/json"}, 400),
    (b"[" * 2000 + b"]" * 2000, {"Content-Type": "application/json"}, 400),
    (b"[1]", {"Content-Type": "application/json"}, 422),
    (b"null", {"Content-Type": "application/json"}, 422),
])
async def test_bad_bodies_get_a_4xx(start_issuer: IssuerFactory, data: bytes, headers: dict[str, str], status: int) -> None:
    client, _ = await start_issuer()
    resp = await client.post("/v1/issuer/token", data=data, headers=headers)
    assert resp.status == status, await resp.text()
    assert "error" in await resp.json()


async def test_chunked_oversize_body_is_413(start_issuer: IssuerFactory) -> None:
    client, _ = await start_issuer()

    async def chunks() -> Any:
        for _ in range(10):
            yield b"x" * 1000

    resp = await client.post("/v1/issuer/token", data=chunks(), headers={"Content-Type": "application/json"})
    assert resp.status == 413


async def test_unknown_routes_and_methods(start_issuer: IssuerFactory) -> None:
    client, _ = await start_issuer()
    assert (await client.get("/v1/issuer/nothing")).status == 404
    resp = await client.get("/v1/issuer/token")
    assert resp.status == 405 and "error" in await resp.json()


async def test_the_address_limit_is_a_second_line(start_issuer: IssuerFactory, issuer_key: IssuerKey,
                                                  app_key: SigningKey) -> None:
    client, _ = await start_issuer(limiter=AddressRateLimiter(rate_per_min=1, burst=3))
    statuses = []
    for n in range(5):
        resp = await client.post("/v1/issuer/token", json=token_body(issuer_key, credential(app_key, f"i{n}"))[0])
        statuses.append(resp.status)
        if resp.status == 429:
            assert (await resp.json())["error"].startswith("too many token requests from this address")
            assert int(resp.headers["Retry-After"]) >= 1
    assert statuses == [200, 200, 200, 429, 429]


async def test_one_log_line_per_refusal(start_issuer: IssuerFactory, issuer_key: IssuerKey, app_key: SigningKey,
                                        caplog: pytest.LogCaptureFixture) -> None:
    client, issuer = await start_issuer()
    caplog.set_level(logging.INFO, logger="fa_issuer")
    await client.post("/v1/issuer/token", json=token_body(issuer_key, credential(app_key, "i", -5))[0])
    await client.post("/v1/issuer/token", json={"credential": "x"})
    lines = [r.getMessage() for r in caplog.records if r.name == "fa_issuer"]
    assert len(lines) == 2
    assert "403 credential refused: expired" in lines[0]
    assert "422 token_key_id: missing" in lines[1]
    assert issuer.refusals == {403: 1, 422: 1}


async def test_a_body_that_does_not_arrive_is_408(start_issuer: IssuerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(issuer_app, "BODY_READ_TIMEOUT_S", 0.2)
    client, _ = await start_issuer()
    stalled = asyncio.Event()

    async def slow() -> Any:
        yield b'{"credential": '
        await stalled.wait()  # never set: the rest never comes
        yield b"}"

    resp = await asyncio.wait_for(
        client.post("/v1/issuer/token", data=slow(), headers={"Content-Type": "application/json"}), 30)
    assert resp.status == 408
    assert "not received within" in (await resp.json())["error"]
