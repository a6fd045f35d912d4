"""Acceptance, against real `fa-server` processes: replays refused across restarts and SIGKILL, bodies bounded
while they stream in, and connections that never complete a request closed on time. (The parser limits and 405
are answers only: tests/analytics_server/test_transport.py.)"""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from analyst_client.cli import AnalystClient
from fa_common.b64 import b64e
from queries.envelope import HDR_PROTOCOL, PROTOCOL_VERSION
from tests.e2e.harness import Fleet, Server, SyncDevice, chunked_upload, fresh_database, rss_bytes
from tests.support import deadlines

pytestmark = pytest.mark.e2e
MiB = 1 << 20


def _checkin(dev: SyncDevice, ts: str | None = None) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"wait_s": 0}).encode()
    h = dev.signed_headers("POST", "/v1/device/checkin", body, ts=ts)
    return body, {**h, "Content-Type": "application/json"}


def _new_server(tmp: Path, name: str, env: dict[str, str] | None = None) -> Server:
    url = f"sqlite+aiosqlite:///{tmp / (name + '.db')}"
    fresh_database(url)
    return Server(url, tmp / f"{name}.log", env=env)


def test_future_stamped_request_replayed_after_the_old_prune_time_is_refused(tmp_path: Path) -> None:
    """Stamped `window − 1` s ahead, a request's timestamp stays acceptable until received + 2·window − 1.
    Pruning its nonce at received + window (the old rule) let it be replayed; the nonce must be kept until
    timestamp + window."""
    window = round(deadlines.stretch(12.0), 1)  # the restart below must fit in window - 1.5 s, even on a busy machine
    srv = _new_server(tmp_path, "future", {"FA_SIGNATURE_WINDOW_S": str(window)}).start()
    try:
        dev = SyncDevice(srv.url)
        dev.register()
        received = time.time()
        body, headers = _checkin(dev, ts=f"{received + window - 1:.3f}")
        status, _, raw = dev.raw("POST", "/v1/device/checkin", body, headers)
        assert status == 200, raw
        time.sleep(max(0.0, received + window + 0.5 - time.time()))  # past the old prune time
        srv.stop()  # a restart reloads nonces from the database: only the database counts
        srv.start()
        assert time.time() - (received + window - 1) < window, "replay must still be inside the timestamp window"
        status, _, raw = dev.raw("POST", "/v1/device/checkin", body, headers)
        assert status == 401 and b"replayed" in raw, (status, raw)
    finally:
        srv.stop()
    assert not srv.log_has_tracebacks()


def test_requests_replayed_after_sigkill_and_restart_are_refused(server: Server) -> None:
    """State-changing requests store their nonce before they act: none is lost in a crash."""
    dev = SyncDevice(server.url)
    dev.register()
    sent = []
    reg_body = json.dumps({"public_key": b64e(dev.public)}).encode()
    reg_headers = {**dev.signed_headers("POST", "/v1/device/register", reg_body, device=False), "Content-Type": "application/json"}
    status, _, raw = dev.raw("POST", "/v1/device/register", reg_body, reg_headers)
    assert status == 201, raw
    sent.append(("/v1/device/register", reg_body, reg_headers))
    for _ in range(5):
        body, headers = _checkin(dev)
        status, _, raw = dev.raw("POST", "/v1/device/checkin", body, headers)
        assert status == 200, raw
        sent.append(("/v1/device/checkin", body, headers))
    server.kill9()  # right after the last answer
    server.start()
    for path, body, headers in sent:
        status, _, raw = dev.raw("POST", path, body, headers)
        assert status == 401 and b"replayed" in raw, (path, status, raw)


def test_chunked_oversized_uploads_are_cut_off_while_streaming(server: Server, tmp_path: Path) -> None:
    """Ten chunked 60 MiB uploads each to registration (413), to a phase as a stranger (401) and to a phase
    as a member of a live cohort (413 at the cohort's message size, far below FA_BINARY_BODY_LIMIT):
    answered without being read whole, and the server's memory stays flat."""
    admin = AnalystClient(server.url, server.token("admin"))
    fleet = Fleet(server.url, 3, tmp_path, seed=31)
    try:
        admin.submit({"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
                      "cohort": {"min_clients": 4, "max_clients": 4, "phase_timeout_s": 300}})
        member = SyncDevice(server.url)
        member.register()
        a = member.checkin_until_assigned()
        phase_path = f"/v1/device/cohorts/{a['cohort_id']}/phases/0"
        stranger = SyncDevice(server.url)
        pid = server.proc.pid  # type: ignore[union-attr]
        before = rss_bytes(pid)
        answers: dict[str, list[tuple[int, int]]] = {"register": [], "stranger": [], "member": []}
        for _ in range(10):
            h = stranger.signed_headers("POST", "/v1/device/register", b"", device=False)
            answers["register"].append(chunked_upload(server.port, "/v1/device/register",
                                                      {**h, "Content-Type": "application/json"}, 60 * MiB))
            answers["stranger"].append(chunked_upload(server.port, phase_path,
                                                      {HDR_PROTOCOL: str(PROTOCOL_VERSION),
                                                       "Content-Type": "application/octet-stream"}, 60 * MiB))
            h = member.signed_headers("POST", phase_path, b"")
            answers["member"].append(chunked_upload(server.port, phase_path,
                                                    {**h, "Content-Type": "application/octet-stream"}, 60 * MiB))
        growth = rss_bytes(pid) - before
        print(json.dumps({"rss_before_mb": round(before / MiB, 1), "rss_growth_mb": round(growth / MiB, 1),
                          "max_sent_before_answer_mb": {k: round(max(s for _, s in v) / MiB, 1) for k, v in answers.items()}}))
        assert {st for st, _ in answers["register"]} == {413}
        assert {st for st, _ in answers["stranger"]} == {401}
        assert {st for st, _ in answers["member"]} == {413}
        assert growth < 50 * MiB, f"server RSS grew by {growth / MiB:.0f} MiB"
        # answered long before the 60 MiB were sent (what was sent sat in socket buffers)
        assert max(sent for v in answers.values() for _, sent in v) < 30 * MiB
    finally:
        fleet.stop()


@contextlib.contextmanager
def _soft_nofile(limit: int) -> Iterator[None]:
    """Lower this process's open-file soft limit (inherited by servers started inside)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _half_open(port: int, n: int) -> list[socket.socket]:
    """n connections: a third send nothing, the others half a request head (the caller drips into some)."""
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if i % 3:
            s.sendall(b"GET /v1/queries HTTP/1.1\r\nHost: x\r\n")
        s.setblocking(False)
        socks.append(s)
    return socks


def _closed_by_server(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _api_ok(url: str, token: str) -> bool:
    req = urllib.request.Request(url + "/v1/queries", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=3) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def test_half_open_connections_are_closed_and_the_api_keeps_answering(tmp_path: Path) -> None:
    idle = 2.0
    srv = _new_server(tmp_path, "halfopen", {"FA_IDLE_TIMEOUT_S": str(idle)})
    with _soft_nofile(1024):
        srv.start()
    try:
        limits = Path(f"/proc/{srv.proc.pid}/limits").read_text()  # type: ignore[union-attr]
        line = next(ln for ln in limits.splitlines() if ln.startswith("Max open files"))
        soft, hard = line.split()[3:5]
        assert soft == hard, line  # raised to the hard limit at startup
        assert "open-file limit raised from 1024" in srv.log_path.read_text() or hard == "1024"
        token = srv.token("analyst")
        socks = _half_open(srv.port, 300)
        drip = socks[2::3]
        answered, started = [], time.monotonic()
        while time.monotonic() - started < idle * 3:
            for s in drip:  # slow-loris: a header byte every 0.3 s keeps arriving
                with contextlib.suppress(OSError):
                    s.send(b"X")
            answered.append(_api_ok(srv.url, token))
            time.sleep(0.3)
        closed = sum(_closed_by_server(s) for s in socks)
        print(json.dumps({"half_open": len(socks), "closed_by_server": closed, "api_ok": sum(answered),
                          "api_requests": len(answered)}))
        for s in socks:
            s.close()
        assert closed == len(socks)
        assert all(answered)
    finally:
        srv.stop()
    assert not srv.log_has_tracebacks()


def _open_descriptors(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_descriptor_exhaustion_does_not_flood_the_log_and_the_server_recovers(tmp_path: Path, loop: str) -> None:
    """With the hard limit itself low, more half-open connections than descriptors: asyncio reports every
    failed accept (uvloop's libuv closes what it cannot keep, silently); the log stays small, and once the
    idle timeout frees descriptors the API answers."""
    idle_s = round(deadlines.stretch(2.0), 1)  # the flood below must outpace the idle timeout, even on a busy machine
    srv = _new_server(tmp_path, f"exhaust-{loop}", {"FA_IDLE_TIMEOUT_S": str(idle_s), "FA_EVENT_LOOP": loop}).start()
    try:
        token = srv.token("analyst")
        pid = srv.proc.pid  # type: ignore[union-attr]
        limit = 128
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
        log_before = srv.log_path.stat().st_size
        socks, most_open, refused = [], 0, 0
        while len(socks) < 300 and refused < 3:  # a full backlog times connections out; a loaded server catches up
            try:
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=1.0)
                s.sendall(b"GET / HTTP/1.1\r\n")
                socks.append(s)
            except OSError:
                refused += 1
            if len(socks) % 8 == 0:  # sampled during the flood too: the idle timeout may free descriptors before its end
                most_open = max(most_open, _open_descriptors(pid))
        flooded = time.monotonic()
        while time.monotonic() - flooded < 5:  # the server accepts what its descriptors allow meanwhile
            most_open = max(most_open, _open_descriptors(pid))
            time.sleep(0.05)
        grown = srv.log_path.stat().st_size - log_before
        for s in socks:
            s.close()
        deadline = time.monotonic() + deadlines.stretch(30.0) + idle_s
        while not _api_ok(srv.url, token):
            assert time.monotonic() < deadline, "the API did not recover"
            time.sleep(0.5)
        text = srv.log_path.read_text(errors="replace")
        print(json.dumps({"loop": loop, "connections": len(socks), "most_open_descriptors": most_open,
                          "log_growth_bytes": grown, "accept_error_lines": text.count("out of system resource")}))
        assert f"event loop: {loop}" in text
        assert most_open >= limit - 2  # the situation did arise: the server's descriptors ran out
        if loop == "asyncio":
            assert "out of system resource" in text  # asyncio reports it (rate-limited)
        assert grown < 200_000, f"log grew by {grown} bytes"
    finally:
        srv.stop()
    assert "Traceback" not in srv.log_path.read_text(errors="replace")
