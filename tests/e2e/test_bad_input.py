"""Acceptance: bad input gets a 4xx with a message naming the problem, never a 5xx, and breaks nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from device_sdk.analyst_cli import AnalystClient, ApiError
from queries.envelope import b64e
from secagg import ClientSession, SecAggConfig, encoding
from secagg.messages import MaskedInput, decode
from tests.e2e.harness import Fleet, Server, SyncDevice, check_exact, fresh_database

pytestmark = pytest.mark.e2e

GOOD = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
        "cohort": {"min_clients": 10, "max_clients": 100, "phase_timeout_s": 5}}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("bad")
    url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
    fresh_database(url)
    s = Server(url, tmp / "server.log", env={"FA_BINARY_BODY_LIMIT": "200000", "FA_JSON_BODY_LIMIT": "100000"}).start()
    yield s
    s.stop()
    assert not s.log_has_tracebacks(), (tmp / "server.log").read_text()[-5000:]


@pytest.fixture(scope="module")
def tokens(srv: Server) -> dict[str, str]:
    return {"analyst": srv.token("analyst"), "admin": srv.token("admin")}


def _raw(srv: Server, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    dev = SyncDevice(srv.url)
    status, _, raw = dev.raw(method, path, body or b"", headers or {})
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def _auth(tokens: dict[str, str], role: str = "analyst", ctype: str | None = "application/json") -> dict[str, str]:
    h = {"Authorization": f"Bearer {tokens[role]}"}
    if ctype:
        h["Content-Type"] = ctype
    return h


@pytest.mark.parametrize(
    "body, field",
    [
        ({**GOOD, "kind": "no_such_kind"}, "kind"),
        ({**GOOD, "cohort": {"min_clients": "ten"}}, "cohort.min_clients"),
        ({**GOOD, "cohort": {"min_clients": 50, "max_clients": 10}}, "cohort"),
        ({**GOOD, "params": {"buckets": "moon"}}, "params.buckets"),
        ({**GOOD, "params": {}}, "params.buckets"),
        ({**GOOD, "privacy": {"mechanism": "skellam"}}, "privacy"),
        ({**GOOD, "privacy": {"epsilon": -1, "delta": 1e-6, "mechanism": "discrete_gaussian"}}, "privacy.epsilon"),
        ({**GOOD, "surprise": 1}, "surprise"),
        ({k: v for k, v in GOOD.items() if k != "source"}, "source"),
        ([1, 2, 3], "body"),
    ],
)
def test_bad_specs_are_422_naming_the_field(srv: Server, tokens: dict[str, str], body: Any, field: str) -> None:
    status, resp = _raw(srv, "POST", "/v1/queries", json.dumps(body).encode(), _auth(tokens))
    assert status == 422, resp
    assert field in resp["error"], resp


def test_malformed_json_wrong_type_and_size(srv: Server, tokens: dict[str, str]) -> None:
    status, resp = _raw(srv, "POST", "/v1/queries", b'{"kind": "histogram",', _auth(tokens))
    assert status == 400 and "malformed JSON" in resp["error"]
    status, resp = _raw(srv, "POST", "/v1/queries", json.dumps(GOOD).encode(), _auth(tokens, ctype="text/plain"))
    assert status == 415 and "application/json" in resp["error"]
    big = json.dumps({**GOOD, "name": "x" * 200_000}).encode()
    status, resp = _raw(srv, "POST", "/v1/queries", big, _auth(tokens))
    assert status == 413 and "limit" in resp["error"]
    status, resp = _raw(srv, "POST", "/v1/queries", b"\xff\xfe", _auth(tokens))
    assert status == 400


def test_tokens_roles_and_unknown_ids(srv: Server, tokens: dict[str, str]) -> None:
    status, resp = _raw(srv, "GET", "/v1/queries")
    assert status == 401 and "Authorization" in resp["error"]
    status, resp = _raw(srv, "GET", "/v1/queries", headers={"Authorization": "Bearer nope"})
    assert status == 401 and "token" in resp["error"]
    status, resp = _raw(srv, "GET", "/v1/queries", headers={"Authorization": "Basic abc"})
    assert status == 401
    status, resp = _raw(srv, "POST", "/v1/admin/tokens", json.dumps({"role": "analyst"}).encode(), _auth(tokens))
    assert status == 403 and "admin" in resp["error"]
    status, resp = _raw(srv, "POST", "/v1/admin/tokens", json.dumps({"role": "analyst"}).encode(), _auth(tokens, "admin"))
    assert status == 201 and resp["token"].startswith("fa_")
    for method, path in [("GET", "/v1/queries/deadbeef"), ("GET", "/v1/queries/deadbeef/result"),
                         ("POST", "/v1/queries/deadbeef/cancel"), ("GET", "/v1/queries/deadbeef/events"),
                         ("GET", "/v1/queries/" + "x" * 300)]:
        status, resp = _raw(srv, method, path, headers=_auth(tokens, ctype=None))
        assert status == 404 and "unknown query" in resp["error"], (path, resp)
    status, resp = _raw(srv, "GET", "/v1/nothing-here", headers=_auth(tokens, ctype=None))
    assert status == 404
    status, resp = _raw(srv, "DELETE", "/v1/queries", headers=_auth(tokens, ctype=None))
    assert status == 405


def test_result_before_finished_and_cancel_after(srv: Server, tokens: dict[str, str]) -> None:
    client = AnalystClient(srv.url, tokens["analyst"])
    qid = client.submit({**GOOD, "cohort": {"min_clients": 10_000, "max_clients": 10_000}})["id"]
    with pytest.raises(ApiError) as exc:
        client.result(qid)
    assert exc.value.status == 409 and "no result" in exc.value.message
    assert client.cancel(qid)["status"] == "cancelled"
    with pytest.raises(ApiError) as exc:
        client.cancel(qid)
    assert exc.value.status == 409 and "already cancelled" in exc.value.message


def test_openapi_health_metrics(srv: Server) -> None:
    status, doc = _raw(srv, "GET", "/v1/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.")
    assert "QuerySpec" in doc["components"]["schemas"] and "/v1/queries/{id}/result" in doc["paths"]
    status, _ = _raw(srv, "GET", "/healthz")
    assert status == 200
    status, text = _raw(srv, "GET", "/metrics")
    assert status == 200
    text = text.decode() if isinstance(text, bytes) else str(text)
    for name in ("fa_queries{", "fa_cohorts_total{", "fa_device_checkins_total", "fa_http_responses_total"):
        assert name in text


def test_device_auth_unsigned_bad_signature_replay(srv: Server) -> None:
    dev = SyncDevice(srv.url)
    # registration must be signed by the key being registered
    body = json.dumps({"public_key": b64e(dev.public)}).encode()
    status, _, raw = dev.raw("POST", "/v1/device/register", body, {"Content-Type": "application/json"})
    assert status == 401 and b"unsigned" in raw
    other = SyncDevice(srv.url)
    h = other.signed_headers("POST", "/v1/device/register", body, device=False)
    status, _, raw = dev.raw("POST", "/v1/device/register", body, {**h, "Content-Type": "application/json"})
    assert status == 401 and b"does not verify" in raw
    status, _, raw = dev.call("POST", "/v1/device/register", json.dumps({"public_key": "AAAA"}).encode(), device=False)
    assert status == 422 and b"public_key" in raw
    dev.register()

    ck = json.dumps({"wait_s": 0}).encode()
    status, _, raw = dev.raw("POST", "/v1/device/checkin", ck, {"Content-Type": "application/json"})
    assert status == 401 and b"unsigned" in raw
    h = dev.signed_headers("POST", "/v1/device/checkin", ck)
    status, _, _ = dev.raw("POST", "/v1/device/checkin", ck, {**h, "Content-Type": "application/json"})
    assert status == 200
    status, _, raw = dev.raw("POST", "/v1/device/checkin", ck, {**h, "Content-Type": "application/json"})
    assert status == 401 and b"replayed" in raw
    h = dev.signed_headers("POST", "/v1/device/checkin", ck)
    status, _, raw = dev.raw("POST", "/v1/device/checkin", json.dumps({"wait_s": 1}).encode(), {**h, "Content-Type": "application/json"})
    assert status == 401 and b"does not verify" in raw  # body swapped under a valid signature
    h = dev.signed_headers("POST", "/v1/device/checkin", ck, ts=str(int(time.time()) - 3600))
    status, _, raw = dev.raw("POST", "/v1/device/checkin", ck, {**h, "Content-Type": "application/json"})
    assert status == 401 and b"window" in raw
    stranger = SyncDevice(srv.url)
    status, _, raw = stranger.call("POST", "/v1/device/checkin", ck)
    assert status == 401 and b"unknown device" in raw
    status, _, raw = dev.call("POST", "/v1/device/checkin", b"{nope")
    assert status == 400
    status, _, raw = dev.call("POST", "/v1/device/checkin", json.dumps({"wait_s": "soon"}).encode())
    assert status == 422 and b"wait_s" in raw
    status, _, raw = dev.call("POST", "/v1/device/cohorts/" + "ab" * 16 + "/phases/0", b"\x00", "application/octet-stream")
    assert status == 404 and b"unknown cohort" in raw
    status, _, raw = dev.call("GET", "/v1/device/cohorts/" + "ab" * 16 + "/phases/9/next", ctype=None)
    assert status == 400 and b"phase" in raw


def test_wrong_vector_length_and_content_type_in_a_live_cohort(srv: Server, tokens: dict[str, str], tmp_path: Path) -> None:
    """A hand-driven member sends a too-long masked vector (400), a wrong content type (415), an oversized body
    (413), a conflicting retry (409), then the right message; the cohort completes exactly, with it included."""
    admin = AnalystClient(srv.url, tokens["admin"])
    fleet = Fleet(srv.url, 20, tmp_path, seed=21)
    try:
        spec = {**GOOD, "cohort": {"min_clients": 15, "max_clients": 100, "phase_timeout_s": 30}}
        qid = admin.submit(spec)["id"]
        dev = SyncDevice(srv.url)
        dev.register()
        a = dev.checkin_until_assigned()
        cfg = SecAggConfig.from_dict(a["secagg"])
        vec = np.zeros(cfg.dim, dtype=np.int64)  # this device holds no words: an all-zero contribution
        client = ClientSession(cfg, a["party_id"], encoding.to_modular(vec, cfg.bits))
        base = f"/v1/device/cohorts/{a['cohort_id']}/phases"
        msg, phase = client.start(), 0
        status, _, raw = dev.call("POST", f"{base}/0", msg, "application/json")
        assert status == 415 and b"octet-stream" in raw
        status, _, raw = dev.call("POST", f"{base}/0", b"\x00" * 300_000, "application/octet-stream")
        assert status == 413
        status, _, raw = dev.call("POST", f"{base}/1", msg, "application/octet-stream")
        assert status == 409 and b"not open" in raw
        while True:
            if phase == 2:
                good = decode(msg)
                assert isinstance(good, MaskedInput)
                wrong = MaskedInput(good.session_id, good.party, good.bits, good.dim + 1,
                                    encoding.pack(np.zeros(good.dim + 1, dtype=np.uint64), good.bits))
                status, _, raw = dev.call("POST", f"{base}/2", wrong.encode(), "application/octet-stream")
                assert status == 400 and b"dim" in raw, raw
                status, _, raw = dev.call("POST", f"{base}/2", b"garbage", "application/octet-stream")
                assert status == 400, raw
            status, _, raw = dev.call("POST", f"{base}/{phase}", msg, "application/octet-stream")
            assert status == 202, raw
            status, _, raw = dev.call("POST", f"{base}/{phase}", msg, "application/octet-stream")
            assert status == 202, raw  # identical retry is harmless
            if phase == 0:
                other = ClientSession(cfg, a["party_id"], encoding.to_modular(vec, cfg.bits)).start()
                status, _, raw = dev.call("POST", f"{base}/0", other, "application/octet-stream")
                assert status == 409 and b"conflicting" in raw
            while True:
                status, headers, raw = dev.call("GET", f"{base}/{phase}/next?wait=10", ctype=None)
                if status != 202:
                    break
            assert status == 200, raw
            if headers.get("Content-Type", "").startswith("application/json"):
                assert json.loads(raw) == {"status": "finished", "contributed": True}
                break
            msg = client.receive(raw)
            phase = int(headers["X-FA-Phase"])
        final = admin.wait(qid, timeout_s=120)
        assert final["status"] == "succeeded", final
        truth = fleet.truth()
        truth[dev.device_id] = {"words": []}
        res = check_exact(admin, qid, spec, truth)
        assert dev.device_id in admin.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"]["0"]
        assert res["result"]["clients"] >= 15
    finally:
        fleet.stop()
