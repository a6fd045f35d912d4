"""Acceptance: hypothesis throws garbage at every device endpoint while a cohort runs; no 5xx, and the
cohort still completes with the exact result."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyst_client.cli import AnalystClient
from fa_common.b64 import b64e
from queries.envelope import HDR_PROTOCOL, PROTOCOL_VERSION
from tests.e2e.harness import Fleet, Server, SyncDevice, check_exact, client_session

pytestmark = pytest.mark.e2e

SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
        "cohort": {"min_clients": 20, "max_clients": 100, "phase_timeout_s": 15}}
CTYPES = ["application/octet-stream", "application/json", "text/plain", "", "multipart/form-data; boundary=x"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=10,
)


def _mutate(data: bytes, draw_pos: int, draw_byte: int) -> bytes:
    if not data:
        return bytes([draw_byte])
    i = draw_pos % len(data)
    return data[:i] + bytes([draw_byte]) + data[i + 1 :]


def test_garbage_at_device_endpoints_during_a_cohort(server: Server, tmp_path: Path) -> None:
    admin = AnalystClient(server.url, server.token("admin"))
    fleet = Fleet(server.url, 30, tmp_path, seed=8)
    try:
        qid = admin.submit(SPEC)["id"]
        attacker = SyncDevice(server.url)
        attacker.register()
        a = attacker.checkin_until_assigned()
        valid = client_session(a, attacker).start()
        cid = a["cohort_id"]
        stranger = SyncDevice(server.url)
        seen: dict[int, int] = {}

        @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(
            endpoint=st.sampled_from(["register", "checkin", "status", "post", "next", "random"]),
            cohort=st.sampled_from([cid, cid[:-1] + "0", "x", "../../v1/queries", "ab" * 40]),
            phase=st.sampled_from(["0", "1", "2", "3", "4", "5", "-1", "x", "99999999999999999999"]),
            body=st.one_of(
                st.binary(max_size=600),
                st.builds(_mutate, st.just(valid), st.integers(0, 10_000), st.integers(0, 255)),
                st.builds(lambda v: json.dumps(v).encode(), json_values),
                st.just(valid),
            ),
            ctype=st.sampled_from(CTYPES),
            auth=st.sampled_from(["valid", "unsigned", "stranger", "bad_sig", "old", "garbage_headers", "other_protocol"]),
            wait=st.sampled_from(["0", "0.05", "x", "-1", "1e9", "nan"]),
        )
        def throw(endpoint: str, cohort: str, phase: str, body: bytes, ctype: str, auth: str, wait: str) -> None:
            method = "POST"
            path = {
                "register": "/v1/device/register",
                "checkin": "/v1/device/checkin",
                "status": f"/v1/device/cohorts/{cohort}",
                "post": f"/v1/device/cohorts/{cohort}/phases/{phase}",
                "next": f"/v1/device/cohorts/{cohort}/phases/{phase}/next?wait={wait}",
                "random": f"/v1/device/{cohort}",
            }[endpoint]
            if endpoint in ("status", "next"):
                method, body = "GET", b""
            if endpoint == "register" and auth == "valid" and body and body[:1] == b"{":
                body = json.dumps({"public_key": b64e(secrets.token_bytes(32))}).encode()
            signer = stranger if auth == "stranger" else attacker
            headers = signer.signed_headers(method, path, body, device=endpoint != "register")
            if auth == "unsigned":
                headers = {HDR_PROTOCOL: str(PROTOCOL_VERSION)}
            elif auth == "bad_sig":
                headers["X-FA-Signature"] = b64e(secrets.token_bytes(64))
            elif auth == "old":
                headers = signer.signed_headers(method, path, body, ts=str(int(time.time()) - 10_000))
            elif auth == "garbage_headers":
                headers = {HDR_PROTOCOL: str(PROTOCOL_VERSION), "X-FA-Device": "no such device", "X-FA-Timestamp": "nan",
                           "X-FA-Nonce": "!", "X-FA-Signature": "%%%"}
            elif auth == "other_protocol":
                headers[HDR_PROTOCOL] = "2"
            if ctype:
                headers["Content-Type"] = ctype
            status, _, raw = attacker.raw(method, path, body, headers, timeout=20)
            seen[status] = seen.get(status, 0) + 1
            assert status < 500, (method, path, status, raw[:300])
            if status >= 400:
                assert b"error" in raw, raw[:300]

        throw()
        assert admin.status(qid)["status"] in ("running", "succeeded")
        final = admin.wait(qid, timeout_s=180)
        assert final["status"] == "succeeded", final
        res = check_exact(admin, qid, SPEC, fleet.truth())
        contributors = admin.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"]["0"]
        assert attacker.device_id not in contributors and res["result"]["clients"] >= 20
        assert len([s for s in seen if s >= 400]) >= 4, seen  # the garbage really exercised several error paths
    finally:
        fleet.stop()
