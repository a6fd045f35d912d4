"""End-to-end helpers: the process stack (analytics_server.devstack) plus truth checks and a hand-driven device."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from analytics_server.devstack import SERVER_ENV, Fleet, Server, cli, free_port, fresh_database  # noqa: F401
from device_sdk.analyst_cli import AnalystClient
from queries.local_run import run_locally
from queries.registry import get_kind


def expected_result(kind: str, params: dict[str, Any], source: str, truth: dict[str, dict[str, list[Any]]],
                    device_ids: list[str]) -> dict[str, Any]:
    """The exact answer over `device_ids` (mechanism none), computed in process by the kind's own code."""
    result, _ = run_locally(get_kind(kind), params, [truth[d].get(source, []) for d in device_ids])
    return result


def check_exact(admin: AnalystClient, query_id: str, spec: dict[str, Any], truth: dict[str, dict[str, list[Any]]]) -> dict[str, Any]:
    res = admin.result(query_id)
    rounds = admin.call("GET", f"/v1/admin/queries/{query_id}/contributors")["rounds"]
    ids = rounds["0"]
    assert len(ids) == len(set(ids)), "a device was counted twice"
    assert set(ids) <= set(truth), "contributors that are not simulated devices"
    expected = expected_result(spec["kind"], spec["params"], spec["source"], truth, ids)
    assert res["result"] == expected
    assert res["result"]["clients"] == len(ids)
    assert res["privacy"]["mechanism"] == "none"
    return res


class SyncDevice:
    """A hand-driven device for bad-input tests: signs like the SDK, but every part can be bent."""

    def __init__(self, server_url: str) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        from queries.envelope import device_id_for

        self.url = server_url
        self.key = Ed25519PrivateKey.generate()
        self.public = self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.device_id = device_id_for(self.public)

    def signed_headers(self, method: str, path_qs: str, body: bytes, device: bool = True, nonce: str | None = None,
                       ts: str | None = None) -> dict[str, str]:
        import secrets as _secrets

        from queries.envelope import b64e, signing_payload

        ts = ts or str(int(time.time()))
        nonce = nonce or _secrets.token_urlsafe(16)
        h = {"X-FA-Timestamp": ts, "X-FA-Nonce": nonce,
             "X-FA-Signature": b64e(self.key.sign(signing_payload(method, path_qs, ts, nonce, body)))}
        if device:
            h["X-FA-Device"] = self.device_id
        return h

    def raw(self, method: str, path_qs: str, body: bytes = b"", headers: dict[str, str] | None = None,
            timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
        import urllib.error

        req = urllib.request.Request(self.url + path_qs, data=body if method != "GET" else None, method=method,
                                     headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def call(self, method: str, path_qs: str, body: bytes = b"", ctype: str | None = "application/json",
             device: bool = True) -> tuple[int, dict[str, str], bytes]:
        headers = self.signed_headers(method, path_qs, body, device)
        if ctype:
            headers["Content-Type"] = ctype
        return self.raw(method, path_qs, body, headers)

    def register(self) -> None:
        from queries.envelope import b64e

        status, _, body = self.call("POST", "/v1/device/register", json.dumps({"public_key": b64e(self.public)}).encode(),
                                    device=False)
        assert status == 201, body

    def checkin_until_assigned(self, timeout_s: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status, _, body = self.call("POST", "/v1/device/checkin", json.dumps({"wait_s": 2}).encode())
            assert status == 200, body
            data = json.loads(body)
            if data.get("assignment"):
                return data["assignment"]
            time.sleep(data.get("retry_after") or 0)
        raise AssertionError("no assignment")
