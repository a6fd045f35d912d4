"""`fa-issuer` as a real process over real HTTP (devstack.processes.Issuer): one credential yields at most its
quota of tokens, the tokens finalize and verify with the published key, requests without a valid credential are
refused, and a restart keeps the quota."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from devstack.processes import Issuer
from fa_common.b64 import b64url_e
from fa_issuer.attesters import mint_credential, new_app_key
from secagg import blind_rsa, identity_token
from secagg.randomness import OsRandom

pytestmark = pytest.mark.e2e
APP = "notes"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def call(url: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read()), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


def issuer_keys(issuer: Issuer) -> dict[bytes, Any]:
    status, body, _ = call(issuer.url + "/v1/issuer/keys")
    assert status == 200 and body["token_type"] == 2
    return identity_token.trusted_keys([blind_rsa.load_public_key(base64.b64decode(k["public_key"])) for k in body["keys"]])


def ask(issuer: Issuer, key: Any, credential: str, identity: bytes) -> tuple[int, dict[str, Any], dict[str, str], Any]:
    pending = identity_token.request(key, identity, OsRandom())
    status, body, headers = call(issuer.url + "/v1/issuer/token", {
        "credential": credential, "token_key_id": b64(pending.token_key_id), "blinded_msg": b64(pending.blinded_msg)})
    return status, body, headers, pending


@pytest.fixture
def app_key() -> SigningKey:
    return new_app_key()


@pytest.fixture
def start(tmp_path: Path, app_key: SigningKey) -> Iterator[Any]:
    started: list[Issuer] = []

    def run(**kwargs: Any) -> Issuer:
        issuer = Issuer(tmp_path, {APP: bytes(app_key.verify_key)}, **kwargs).start()
        started.append(issuer)
        return issuer

    yield run
    for issuer in started:
        issuer.stop()
    for issuer in started[-1:]:
        assert "Traceback" not in issuer.log_text(), issuer.log_text()[-5000:]


def test_one_credential_yields_at_most_its_quota_of_tokens_that_verify(start: Any, app_key: SigningKey) -> None:
    issuer = start(tokens_per_day=2)
    keys = issuer_keys(issuer)
    (key,) = keys.values()
    credential = mint_credential(app_key, APP, "install-1", int(time.time()) + 3600)
    identities = [bytes([n]) * 32 for n in range(6)]
    answers = [ask(issuer, key, credential, identity) for identity in identities]
    assert [a[0] for a in answers] == [200, 200, 429, 429, 429, 429]
    assert [a[1]["remaining"] for a in answers[:2]] == [1, 0]
    for status, body, headers, _ in answers[2:]:
        assert body["error"].startswith("quota spent: install 'install-1' of app 'notes' has had 2 of its 2 token(s)")
        assert 0 < int(headers["Retry-After"]) <= 86400
    for identity, (_, body, _, pending) in zip(identities, answers[:2]):
        token = pending.finalize(base64.b64decode(body["blind_sig"]))
        assert identity_token.verify(token.encode(), identity, keys) == token
    assert "429 quota spent" in issuer.log_text()


def test_fifty_requests_without_a_valid_credential_are_refused(start: Any, app_key: SigningKey) -> None:
    issuer = start(extra=["--burst", "100"])
    (key,) = issuer_keys(issuer).values()
    now = int(time.time())
    stranger = new_app_key()
    payload = b'{"app":"notes","install":"x","not_after":%d}' % (now + 3600)
    credentials = [
        *(mint_credential(stranger, APP, f"sybil-{n}", now + 3600) for n in range(15)),  # not the app's backend
        *(mint_credential(app_key, APP, f"late-{n}", now - 60) for n in range(10)),  # expired
        *(mint_credential(app_key, "calendar", f"other-{n}", now + 3600) for n in range(10)),  # unknown app
        *(f"{b64url_e(payload)}.{b64url_e(bytes(64))}" for _ in range(5)),  # no signature
        *(f"garbage-{n}" for n in range(10)),
    ]
    assert len(credentials) == 50
    statuses = []
    for n, credential in enumerate(credentials):
        status, body, _, _ = ask(issuer, key, credential, bytes([n]) * 32)
        statuses.append(status)
        assert status == 403 and body["error"].startswith("credential refused: "), body
        assert "blind_sig" not in body
    assert statuses == [403] * 50
    refusals = [line for line in issuer.log_text().splitlines() if "refused POST /v1/issuer/token" in line]
    assert len(refusals) == 50


def test_a_restart_keeps_the_quota(start: Any, app_key: SigningKey) -> None:
    issuer = start(tokens_per_day=1)
    (key_id, key), = issuer_keys(issuer).items()
    credential = mint_credential(app_key, APP, "install-r", int(time.time()) + 3600)
    assert ask(issuer, key, credential, bytes(32))[0] == 200
    issuer.stop()
    again = start(tokens_per_day=1)  # same key file and database
    assert list(issuer_keys(again)) == [key_id]
    status, body, _, _ = ask(again, key, credential, b"\x01" * 32)
    assert status == 429 and body["error"].startswith("quota spent"), body
    other = mint_credential(app_key, APP, "install-s", int(time.time()) + 3600)
    assert ask(again, key, other, b"\x02" * 32)[0] == 200
