"""Bad input against the app in process: a 4xx with a message naming the problem, never a 5xx.

Analyst side: invalid specs (422 naming the field), malformed JSON, content type and size, tokens and roles,
unknown ids, result before success and cancel after the end. Device side: protocol version, unsigned,
badly signed and replayed requests. Bad input during a live cohort, and the fleet's exact result after it,
is end to end (tests/e2e/test_bad_input.py, tests/e2e/test_garbage.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from analytics_server.state import STATE
from analyst_client.cli import AnalystClient, ApiError
from fa_common.b64 import b64e
from queries.envelope import HDR_PROTOCOL, PROTOCOL_VERSION
from tests.signed_device import SignedDevice

GOOD = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
        "cohort": {"min_clients": 10, "max_clients": 100, "phase_timeout_s": 5}}
LIMITS = {"json_body_limit": 100_000, "binary_body_limit": 200_000}


@pytest.fixture
async def srv(start_app_server: Callable[..., Awaitable[TestServer]]) -> TestServer:
    return await start_app_server(**LIMITS)


async def _token(srv: TestServer, role: str = "analyst") -> str:
    return await srv.app[STATE].store.tokens.create(role)


async def _raw(srv: TestServer, method: str, path: str, body: bytes = b"",
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    """(status, headers, JSON body or raw bytes)."""
    url = str(srv.make_url("")).rstrip("/") + path
    async with aiohttp.ClientSession() as http:
        async with http.request(method, url, data=body or None, headers=headers or {}) as r:
            raw = await r.read()
            try:
                return r.status, dict(r.headers), json.loads(raw)
            except ValueError:
                return r.status, dict(r.headers), raw


async def _device(srv: TestServer, dev: SignedDevice, method: str, path: str, body: bytes = b"",
                  ctype: str | None = "application/json", device: bool = True) -> tuple[int, Any]:
    headers = dev.signed_headers(method, path, body, device)
    if ctype:
        headers["Content-Type"] = ctype
    status, _, resp = await _raw(srv, method, path, body, headers)
    return status, resp


async def _register(srv: TestServer, dev: SignedDevice) -> None:
    status, resp = await _device(srv, dev, "POST", "/v1/device/register",
                                 json.dumps({"public_key": b64e(dev.public)}).encode(), device=False)
    assert status == 201, resp


def _auth(token: str, ctype: str | None = "application/json") -> dict[str, str]:
    h = {"Authorization": f"Bearer {token}"}
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
async def test_bad_specs_are_422_naming_the_field(srv: TestServer, body: Any, field: str) -> None:
    status, _, resp = await _raw(srv, "POST", "/v1/queries", json.dumps(body).encode(), _auth(await _token(srv)))
    assert status == 422, resp
    assert field in resp["error"], resp


async def test_malformed_json_wrong_type_and_size(srv: TestServer) -> None:
    token = await _token(srv)
    status, _, resp = await _raw(srv, "POST", "/v1/queries", b'{"kind": "histogram",', _auth(token))
    assert status == 400 and "malformed JSON" in resp["error"]
    status, _, resp = await _raw(srv, "POST", "/v1/queries", json.dumps(GOOD).encode(), _auth(token, ctype="text/plain"))
    assert status == 415 and "application/json" in resp["error"]
    big = json.dumps({**GOOD, "name": "x" * 200_000}).encode()
    status, _, resp = await _raw(srv, "POST", "/v1/queries", big, _auth(token))
    assert status == 413 and "limit" in resp["error"]
    status, _, resp = await _raw(srv, "POST", "/v1/queries", b"\xff\xfe", _auth(token))
    assert status == 400


async def test_tokens_roles_and_unknown_ids(srv: TestServer) -> None:
    analyst, admin = await _token(srv), await _token(srv, "admin")
    status, _, resp = await _raw(srv, "GET", "/v1/queries")
    assert status == 401 and "Authorization" in resp["error"]
    status, _, resp = await _raw(srv, "GET", "/v1/queries", headers={"Authorization": "Bearer nope"})
    assert status == 401 and "token" in resp["error"]
    status, _, resp = await _raw(srv, "GET", "/v1/queries", headers={"Authorization": "Basic abc"})
    assert status == 401
    status, _, resp = await _raw(srv, "POST", "/v1/admin/tokens", json.dumps({"role": "analyst"}).encode(), _auth(analyst))
    assert status == 403 and "admin" in resp["error"]
    status, _, resp = await _raw(srv, "POST", "/v1/admin/tokens", json.dumps({"role": "analyst"}).encode(), _auth(admin))
    assert status == 201 and resp["token"].startswith("fa_")
    for method, path in [("GET", "/v1/queries/deadbeef"), ("GET", "/v1/queries/deadbeef/result"),
                         ("POST", "/v1/queries/deadbeef/cancel"), ("GET", "/v1/queries/deadbeef/events"),
                         ("GET", "/v1/queries/" + "x" * 300)]:
        status, _, resp = await _raw(srv, method, path, headers=_auth(analyst, ctype=None))
        assert status == 404 and "unknown query" in resp["error"], (path, resp)
    status, _, resp = await _raw(srv, "GET", "/v1/nothing-here", headers=_auth(analyst, ctype=None))
    assert status == 404
    status, _, resp = await _raw(srv, "DELETE", "/v1/queries", headers=_auth(analyst, ctype=None))
    assert status == 405


async def test_result_before_finished_and_cancel_after(srv: TestServer) -> None:
    client = AnalystClient(str(srv.make_url("")), await _token(srv))
    qid = (await asyncio.to_thread(client.submit, {**GOOD, "cohort": {"min_clients": 10_000, "max_clients": 10_000}}))["id"]
    with pytest.raises(ApiError) as exc:
        await asyncio.to_thread(client.result, qid)
    assert exc.value.status == 409 and "no result" in exc.value.message
    assert (await asyncio.to_thread(client.cancel, qid))["status"] == "cancelled"
    with pytest.raises(ApiError) as exc:
        await asyncio.to_thread(client.cancel, qid)
    assert exc.value.status == 409 and "already cancelled" in exc.value.message


async def test_events_refuse_a_bad_last_event_id(srv: TestServer) -> None:
    client = AnalystClient(str(srv.make_url("")), await _token(srv))
    qid = (await asyncio.to_thread(client.submit, {**GOOD, "cohort": {"min_clients": 10_000, "max_clients": 10_000}}))["id"]
    for bad in ("yesterday", "-1", "1" * 30):
        hdr = {**_auth(client.token, ctype=None), "Last-Event-ID": bad}
        status, _, resp = await _raw(srv, "GET", f"/v1/queries/{qid}/events", headers=hdr)
        assert status == 400 and "Last-Event-ID" in resp["error"], (bad, resp)


async def test_openapi_health_metrics(srv: TestServer) -> None:
    status, _, doc = await _raw(srv, "GET", "/v1/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.")
    assert "QuerySpec" in doc["components"]["schemas"] and "/v1/queries/{id}/result" in doc["paths"]
    status, _, _ = await _raw(srv, "GET", "/healthz")
    assert status == 200
    status, _, text = await _raw(srv, "GET", "/metrics")
    assert status == 200
    text = text.decode() if isinstance(text, bytes) else str(text)
    for name in ("fa_queries{", "fa_cohorts_total{", "fa_device_checkins_total", "fa_http_responses_total"):
        assert name in text


async def test_device_auth_unsigned_bad_signature_replay(srv: TestServer) -> None:
    dev = SignedDevice()
    protocol = {HDR_PROTOCOL: str(PROTOCOL_VERSION)}
    # registration must be signed by the key being registered
    body = json.dumps({"public_key": b64e(dev.public)}).encode()
    status, _, raw = await _raw(srv, "POST", "/v1/device/register", body, {**protocol, "Content-Type": "application/json"})
    assert status == 401 and "unsigned" in raw["error"]
    other = SignedDevice()
    h = other.signed_headers("POST", "/v1/device/register", body, device=False)
    status, _, raw = await _raw(srv, "POST", "/v1/device/register", body, {**h, "Content-Type": "application/json"})
    assert status == 401 and "does not verify" in raw["error"]
    status, raw = await _device(srv, dev, "POST", "/v1/device/register", json.dumps({"public_key": "AAAA"}).encode(),
                                device=False)
    assert status == 422 and "public_key" in raw["error"]
    await _register(srv, dev)

    ck = json.dumps({"wait_s": 0}).encode()
    status, _, raw = await _raw(srv, "POST", "/v1/device/checkin", ck, {**protocol, "Content-Type": "application/json"})
    assert status == 401 and "unsigned" in raw["error"]
    h = dev.signed_headers("POST", "/v1/device/checkin", ck)
    status, _, _ = await _raw(srv, "POST", "/v1/device/checkin", ck, {**h, "Content-Type": "application/json"})
    assert status == 200
    status, _, raw = await _raw(srv, "POST", "/v1/device/checkin", ck, {**h, "Content-Type": "application/json"})
    assert status == 401 and "replayed" in raw["error"]
    h = dev.signed_headers("POST", "/v1/device/checkin", ck)
    status, _, raw = await _raw(srv, "POST", "/v1/device/checkin", json.dumps({"wait_s": 1}).encode(),
                                {**h, "Content-Type": "application/json"})
    assert status == 401 and "does not verify" in raw["error"]  # body swapped under a valid signature
    h = dev.signed_headers("POST", "/v1/device/checkin", ck, ts=str(int(time.time()) - 3600))
    status, _, raw = await _raw(srv, "POST", "/v1/device/checkin", ck, {**h, "Content-Type": "application/json"})
    assert status == 401 and "window" in raw["error"]
    status, raw = await _device(srv, SignedDevice(), "POST", "/v1/device/checkin", ck)
    assert status == 401 and "unknown device" in raw["error"]
    status, raw = await _device(srv, dev, "POST", "/v1/device/checkin", b"{nope")
    assert status == 400
    status, raw = await _device(srv, dev, "POST", "/v1/device/checkin", json.dumps({"wait_s": "soon"}).encode())
    assert status == 422 and "wait_s" in raw["error"]
    status, raw = await _device(srv, dev, "POST", "/v1/device/checkin", json.dumps({"wait_s": 61}).encode())
    assert status == 422 and "wait_s" in raw["error"]
    status, raw = await _device(srv, dev, "POST", "/v1/device/cohorts/" + "ab" * 16 + "/phases/0", b"\x00",
                                "application/octet-stream")
    assert status == 404 and "unknown cohort" in raw["error"]
    for phase in ("9", "%C2%B2"):  # "²".isdigit() is True, but it is no phase
        status, raw = await _device(srv, dev, "GET", "/v1/device/cohorts/" + "ab" * 16 + f"/phases/{phase}/next", ctype=None)
        assert status == 400 and "phase" in raw["error"], raw
    status, raw = await _device(srv, dev, "GET", "/v1/device/cohorts/" + "ab" * 16 + "/phases/0/next?wait=61", ctype=None)
    assert status == 400 and "between 0 and 60 seconds" in raw["error"]


@pytest.mark.parametrize("version", [None, "", "0", "1", "2", "4", "3.0", "v3"])
async def test_device_requests_of_another_protocol_version_are_refused(srv: TestServer, version: str | None) -> None:
    """Every device route refuses a request without this server's protocol version, naming the supported one,
    before looking at anything else (here: a registered device's otherwise valid, signed requests)."""
    dev = SignedDevice()
    await _register(srv, dev)
    ck = json.dumps({"wait_s": 0}).encode()
    cohort = "/v1/device/cohorts/" + "ab" * 16
    for method, path, body in [("POST", "/v1/device/register", json.dumps({"public_key": b64e(dev.public)}).encode()),
                               ("POST", "/v1/device/checkin", ck), ("GET", cohort, b""),
                               ("POST", cohort + "/phases/0", b"\x00"), ("GET", cohort + "/phases/0/next", b"")]:
        headers = dev.signed_headers(method, path, body, device=not path.endswith("register"))
        if version is None:
            del headers[HDR_PROTOCOL]
        else:
            headers[HDR_PROTOCOL] = version
        status, answer_headers, raw = await _raw(srv, method, path, body, {**headers, "Content-Type": "application/json"})
        assert status == 400, (path, raw)
        assert f"speaks device protocol {PROTOCOL_VERSION}" in raw["error"] and HDR_PROTOCOL in raw["error"], raw
        assert answer_headers[HDR_PROTOCOL] == str(PROTOCOL_VERSION)
    status, raw = await _device(srv, dev, "POST", "/v1/device/checkin", ck)  # the same request in this version
    assert status == 200, raw
