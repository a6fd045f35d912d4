"""End-to-end helpers: the process stack (devstack/processes.py) plus truth checks and a hand-driven device."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from analyst_client.audit import AuditReport, audit_log
from analyst_client.cli import AnalystClient
from devstack.processes import SERVER_ENV, Fleet, Server, cli, free_port, free_port_run, fresh_database  # noqa: F401
from queries.local_run import run_locally
from queries.registry import get_kind
from tests.signed_device import SignedDevice

RESTART_ENV = {"FA_LEASE_TTL_S": "8", "FA_HEARTBEAT_S": "1"}
"""For a server that a test SIGKILLs and starts again: the killed process's query leases lapse after 8 s instead
of 30 s (only then does the new process take its queries over), still several heartbeats past the event loop's
stalls with these tests' fleets of at most a few hundred devices."""


@contextmanager
def server_on_fresh_sqlite(tmp: Path, env: dict[str, str] | None = None) -> Iterator[Server]:
    """A server process on a new, migrated SQLite file in `tmp` (for a module's tests); stopped at the end,
    when its log must hold no traceback."""
    url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
    fresh_database(url)
    srv = Server(url, tmp / "server.log", env=env).start()
    try:
        yield srv
    finally:
        srv.stop()
    assert not srv.log_has_tracebacks(), (tmp / "server.log").read_text()[-5000:]


def expected_result(kind: str, params: dict[str, Any], source: str, truth: dict[str, dict[str, list[Any]]],
                    device_ids: list[str]) -> dict[str, Any]:
    """The exact answer over `device_ids` (mechanism none), computed in process by the kind's own code."""
    result, _ = run_locally(get_kind(kind), params, [truth[d].get(source, []) for d in device_ids])
    return result


def audit_clean(url: str, token: str | None = None, state: Path | None = None) -> AuditReport:
    """`fa audit` of the server's transparency log (with `token`, against what it reports too) finds nothing."""
    report = audit_log(url, token=token, state=state)
    assert report.ok, [f"{f.code} @ {f.index}: {f.message}" for f in report.findings]
    return report


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


def client_session(a: dict[str, Any], device: SignedDevice, rows: list[Any] | None = None) -> Any:
    """A secagg ClientSession for an assignment's JSON, as `device`'s SDK would run it: signed with its key, bound
    to the task digest, checking its peers — holding its contribution from `rows` (none: the all-zero vector), with
    its noise and validity proof when the assignment asks for proofs."""
    from device_sdk.admission import ParsedAssignment, parse_assignment
    from device_sdk.randomness import DeviceRandomness
    from device_sdk.validity import masked_content
    from queries.envelope import Assignment
    from secagg import ClientSession, encoding

    parsed = parse_assignment(Assignment.model_validate(a))  # the SDK's one parse of the assignment
    assert isinstance(parsed, ParsedAssignment), parsed
    draws = DeviceRandomness().for_contribution(parsed.assignment.cohort_id)
    vec, proof = masked_content(parsed, parsed.kind.contribute(parsed.task, list(rows or []), draws.kind), draws)
    cfg = parsed.secagg
    return ClientSession(cfg, a["party_id"], encoding.to_modular(vec, cfg.bits), device.key, input_proof=proof,
                         task_digest=parsed.digest)


class SyncDevice(SignedDevice):
    """A hand-driven device for bad-input tests (blocking HTTP): signs like the SDK, but every part can be bent."""

    def __init__(self, server_url: str) -> None:
        super().__init__()
        self.url = server_url

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
        from fa_common.b64 import b64e

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


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def chunked_upload(port: int, path: str, headers: dict[str, str], total: int, timeout_s: float = 60) -> tuple[int, int]:
    """POST `total` zero bytes with Transfer-Encoding: chunked (no Content-Length), stopping as soon as the
    server answers. Returns (status, bytes of body sent before the answer)."""
    frame = f"{64 * 1024:x}\r\n".encode() + b"\0" * (64 * 1024) + b"\r\n"
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode())
        s.setblocking(False)
        sent, pending, answer = 0, memoryview(frame), b""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            writing = [s] if pending else []
            readable, writable, _ = select.select([s], writing, [], 1.0)
            if readable:
                try:
                    data = s.recv(65536)
                except ConnectionResetError:
                    data = b""
                if not data:
                    break
                answer += data
                if b"\r\n" in answer:
                    return int(answer.split(b" ", 2)[1]), sent
            if writable:
                try:
                    n = s.send(pending)
                except (BrokenPipeError, ConnectionResetError):
                    pending = memoryview(b"")
                    continue
                pending = pending[n:]
                if not pending and sent < total:
                    sent += 64 * 1024
                    pending = memoryview(frame if sent < total else b"0\r\n\r\n")
        raise AssertionError(f"no answer to the chunked upload to {path} (sent {sent} bytes, got {answer[:100]!r})")
