"""Identities the server cannot mint, with real processes (docs/identities.md): `fa-issuer`, `fa-server` and `fa-sim`.

- Sybils: 50 registrations without a token (and one with a token another issuer made) are refused by a server that
  trusts the issuer; nothing of them is stored.
- The honest path: fa-sim devices (fa-sim acting as the app's backend, minting one credential per install) and
  Node devices enrol with the issuer, register with tokens, pin the issuer's key and want the whole cohort
  credentialed; their cohort releases the exact histogram.
- The attack: the server's operator runs an issuer of its own and configures the server to trust it beside the real
  one, then seats 19 identities it minted beside one real device in a cohort of 20. The real device, pinning the
  real issuer's key, counts itself alone (its peers' signatures verify, their tokens do not), refuses before its
  masked input leaves, and the query fails without a release.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from analyst_client.client import AnalystClient, ApiError
from devstack.js_fleet import JsFleet, js_missing, scenario_data
from devstack.processes import Issuer, new_app_key_file
from queries.envelope import HDR_NONCE, HDR_PROTOCOL, HDR_SIGNATURE, HDR_TIMESTAMP, PROTOCOL_VERSION, signing_payload
from tests.e2e.harness import Fleet, Server, check_exact, fresh_database

pytestmark = pytest.mark.e2e

N = 20
SPEC = {"kind": "histogram", "source": "words", "name": "identities",
        "params": {"buckets": ["moon", "sun", "star", "cloud", "rain", "snow", "river"], "other_bucket": "other",
                   "max_contributions_per_device": 2},
        "privacy": {"mechanism": "none"},
        "cohort": {"min_clients": N, "max_clients": N, "phase_timeout_s": 15}}
WAIT_S = 240


def _keys_of(issuer: Issuer) -> list[str]:
    with urllib.request.urlopen(issuer.url + "/v1/issuer/keys", timeout=30) as r:
        return [k["public_key"] for k in json.loads(r.read())["keys"]]


def _app(tmp: Path, name: str) -> tuple[Path, bytes]:
    """An app backend's key file (what `fa-issuer app-key --out` writes) and its public key."""
    path = tmp / f"{name}.key"
    key = new_app_key_file(path)
    return path, bytes(key.verify_key)


def _server(tmp: Path, env: dict[str, str]) -> Server:
    url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
    fresh_database(url)
    return Server(url, tmp / "server.log", env={"FA_MAX_CONSECUTIVE_ABORTS": "1", **env}).start()


def _register(url: str, body: dict[str, Any], key: Ed25519PrivateKey) -> tuple[int, dict[str, Any]]:
    raw = json.dumps(body).encode()
    ts, nonce = str(int(time.time())), base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
    sig = key.sign(signing_payload("POST", "/v1/device/register", ts, nonce, raw))
    req = urllib.request.Request(url + "/v1/device/register", data=raw, method="POST", headers={
        "Content-Type": "application/json", HDR_PROTOCOL: str(PROTOCOL_VERSION), HDR_TIMESTAMP: ts, HDR_NONCE: nonce,
        HDR_SIGNATURE: base64.b64encode(sig).decode()})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_registrations_without_the_issuers_token_are_refused(tmp_path: Path) -> None:
    app_key, app_public = _app(tmp_path, "app")
    (tmp_path / "issuer").mkdir()
    issuer = Issuer(tmp_path / "issuer", {"app": app_public}).start()
    server = _server(tmp_path, {"FA_ISSUER_URL": issuer.url})
    try:
        refused = []
        for _ in range(50):
            key = Ed25519PrivateKey.generate()
            public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
            status, body = _register(server.url, {"public_key": base64.b64encode(public).decode()}, key)
            refused.append((status, body["error"].split(":")[0]))
        assert refused == [(403, "identity_token")] * 50
        key = Ed25519PrivateKey.generate()
        public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        forged = base64.b64encode(bytes(354)).decode()
        status, body = _register(server.url, {"public_key": base64.b64encode(public).decode(), "identity_token": forged}, key)
        assert status == 403 and "identity_token" in body["error"], body
    finally:
        server.stop()
        issuer.stop()
    assert not server.log_has_tracebacks()


def test_a_server_seating_identities_of_its_own_releases_nothing(tmp_path: Path) -> None:
    """The server trusts a second issuer of its own and seats its identities beside one real device that pins the real
    issuer: only the victim itself holds a token it accepts, below its neighbourhood's share threshold, so it refuses
    (`unsafe_parameters`) before it encrypts a single share; nothing is released."""
    real_app, real_public = _app(tmp_path, "real-app")
    own_app, own_public = _app(tmp_path, "own-app")
    for d in ("real", "own"):
        (tmp_path / d).mkdir()
    real = Issuer(tmp_path / "real", {"fa-sim": real_public}).start()
    own = Issuer(tmp_path / "own", {"fa-sim": own_public}, tokens_per_day=1000).start()
    server = _server(tmp_path, {"FA_ISSUER_KEYS": ",".join(_keys_of(real) + _keys_of(own))})
    made_up = Fleet(server.url, N - 1, tmp_path, seed=11, extra=["--issuer", own.url, "--app-key", str(own_app)])
    victim = Fleet(server.url, 1, tmp_path, seed=12, extra=["--issuer", real.url, "--app-key", str(real_app),
                                                           "--policy", json.dumps({"min_cohort": N})])
    try:
        admin = AnalystClient(server.url, server.token("admin"))
        qid = admin.submit(SPEC)["id"]
        final = admin.wait(qid, timeout_s=WAIT_S)
        assert final["status"] == "failed" and "unsafe_parameters" in (final["error"] or ""), final
        with pytest.raises(ApiError) as no_result:
            admin.result(qid)
        assert no_result.value.status == 409
        assert final["progress"]["rounds_done"] == 0 and final["progress"]["contributors"] == 0, final["progress"]
    finally:
        made_up.stop()
        victim.stop()
        server.stop()
        real.stop()
        own.stop()
    assert not server.log_has_tracebacks()


def test_a_mixed_python_and_node_fleet_with_identity_tokens_releases_the_exact_histogram(tmp_path: Path) -> None:
    """Ten fa-sim and ten Node devices (fleet.mjs) enrol with one issuer, pin its key and want all 20 verified and
    credentialed: their tokens verify across the two SDKs, and the histogram is exact."""
    missing = js_missing(browser=False)
    assert not missing, f"the Node devices need Node and the built JS SDK (make js): {missing}"
    app_key, app_public = _app(tmp_path, "app")
    (tmp_path / "issuer").mkdir()
    issuer = Issuer(tmp_path / "issuer", {"fa-sim": app_public}).start()
    server = _server(tmp_path, {"FA_ISSUER_URL": issuer.url})
    node = JsFleet(server.url, scenario_data("words", 31, N // 2), tmp_path, "node", seed=4, issuer=issuer.url,
                   app_key=app_key, policy={"minCohort": N})
    py = Fleet(server.url, N // 2, tmp_path, seed=6, extra=["--issuer", issuer.url, "--app-key", str(app_key),
                                                             "--policy", json.dumps({"min_cohort": N})])
    try:
        admin = AnalystClient(server.url, server.token("admin"))
        qid = admin.submit(SPEC)["id"]
        final = admin.wait(qid, timeout_s=WAIT_S)
        assert final["status"] == "succeeded", final
        check_exact(admin, qid, SPEC, {**py.truth(), **node.truth()})
    finally:
        py.stop()
        report = node.stop()
        server.stop()
        issuer.stop()
    assert report.get("outcomes", {}).get("refused", 0) == 0, report
    assert not server.log_has_tracebacks()
