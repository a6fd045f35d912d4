"""Acceptance (issue 29): clients that close their check-in long-poll's connection are withdrawn at once by the real
`fa-server` process, long before their long-poll would have ended, and no cohort ever seats one: a query that would
take every available device (max 100) runs with the live fleet only and succeeds, exactly."""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from pathlib import Path

import pytest

from analyst_client.cli import AnalystClient
from tests.e2e.harness import SyncDevice, check_exact, server_on_fresh_sqlite
from tests.support import deadlines
from tests.support.devstack import Fleet

pytestmark = pytest.mark.e2e

LONG_POLL_S = 60
"""The dropped clients' long-poll (and the server's cap): without the withdrawal they would stay seatable at least
half of it (the server's jitter) plus its retry_after and slack."""
WITHDRAWN_WITHIN_S = 10.0
"""Noticing 20 closed connections and writing their withdrawal: 0.2 s and one commit on an idle machine."""
GHOSTS = 20
SPEC = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
        "cohort": {"min_clients": 10, "max_clients": 100, "phase_timeout_s": 30}}


def _open_long_poll(dev: SyncDevice, port: int) -> socket.socket:
    """Send `dev`'s signed check-in (a LONG_POLL_S long-poll) on a raw connection and leave it waiting."""
    body = json.dumps({"wait_s": LONG_POLL_S}).encode()
    headers = {**dev.signed_headers("POST", "/v1/device/checkin", body), "Content-Type": "application/json",
               "Content-Length": str(len(body)), "Host": f"127.0.0.1:{port}"}
    head = "POST /v1/device/checkin HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head.encode() + body)
    return sock


def _availability(db: Path, device_ids: list[str]) -> dict[str, float]:
    """The devices' `available_until` as the server stored it (0.0: withdrawn)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        rows = con.execute(f"SELECT device_id, available_until FROM device_presence WHERE device_id IN "
                           f"({','.join('?' * len(device_ids))})", device_ids).fetchall()
    return {d: float(u) for d, u in rows}


def _wait_for(read, ok, timeout_s: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not ok(got := read()):
        assert time.monotonic() < deadline, f"condition not met within {timeout_s:.1f} s: {got!r}"
        time.sleep(0.05)
    return got


def test_dropped_long_polls_are_never_seated(tmp_path: Path) -> None:
    env = {"FA_CHECKIN_MAX_WAIT_S": str(LONG_POLL_S)}
    with server_on_fresh_sqlite(tmp_path, env=env) as srv:
        db = tmp_path / "fa.db"
        ghosts = [SyncDevice(srv.url) for _ in range(GHOSTS)]
        for g in ghosts:
            g.register()
        ids = [g.device_id for g in ghosts]
        socks = [_open_long_poll(g, srv.port) for g in ghosts]
        opened = time.time()
        try:
            _wait_for(lambda: _availability(db, ids),
                      lambda got: len(got) == GHOSTS and all(u > opened + LONG_POLL_S / 2 for u in got.values()),
                      deadlines.stretch(60))
        finally:
            for s in socks:
                s.close()  # mid long-poll: the client is gone
        closed = time.monotonic()
        _wait_for(lambda: _availability(db, ids), lambda got: all(u == 0.0 for u in got.values()),
                  deadlines.stretch(WITHDRAWN_WITHIN_S))
        assert time.monotonic() - closed < LONG_POLL_S / 2, "withdrawn no sooner than the long-polls would have lapsed"

        admin = AnalystClient(srv.url, srv.token("admin"))
        fleet = Fleet(srv.url, 12, tmp_path, seed=29)
        try:
            qid = admin.submit(SPEC)["id"]
            final = admin.wait(qid, timeout_s=deadlines.stretch(180))
            assert final["status"] == "succeeded", final
            truth = fleet.truth()
            res = check_exact(admin, qid, SPEC, truth)
            assert res["result"]["clients"] >= SPEC["cohort"]["min_clients"]  # type: ignore[index]
        finally:
            fleet.stop()
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
            seated = {d for (d,) in con.execute("SELECT device_id FROM cohort_members")}
            cohorts = con.execute("SELECT status FROM cohorts").fetchall()
        assert seated and seated <= set(truth), "a cohort seated a device whose long-poll had closed"
        assert seated.isdisjoint(ids)
        assert [s for (s,) in cohorts] == ["finished"], cohorts  # no ghost cohort that aborted
