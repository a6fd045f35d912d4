"""Acceptance (issue 29): clients that close their check-in long-poll's connection are withdrawn at once by the real
`fa-server` process, long before their long-poll would have ended, and no cohort ever seats one: a query that would
take every available device (max 100) runs with the live fleet only and succeeds, exactly."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from analyst_client.cli import AnalystClient
from analytics_server.db.engine import make_engine
from analytics_server.db.models import Cohort, CohortMember, DevicePresence
from devstack.processes import Fleet, Server
from tests.e2e.harness import SyncDevice, check_exact
from tests.support import deadlines

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


def _read(db_url: str, statement: Any) -> list[Any]:
    """Rows of `statement` in the server's database (SQLite or PostgreSQL)."""
    async def read() -> list[Any]:
        engine = make_engine(db_url)
        try:
            async with engine.connect() as con:
                return list((await con.execute(statement)).all())
        finally:
            await engine.dispose()

    return asyncio.run(read())


def _availability(db_url: str, device_ids: list[str]) -> dict[str, float]:
    """The devices' `available_until` as the server stored it (0.0: withdrawn)."""
    rows = _read(db_url, select(DevicePresence.device_id, DevicePresence.available_until)
                 .where(DevicePresence.device_id.in_(device_ids)))
    return {d: float(u) for d, u in rows}


def _wait_for(read, ok, timeout_s: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not ok(got := read()):
        assert time.monotonic() < deadline, f"condition not met within {timeout_s:.1f} s: {got!r}"
        time.sleep(0.05)
    return got


@pytest.mark.server_env({"FA_CHECKIN_MAX_WAIT_S": str(LONG_POLL_S)})
def test_dropped_long_polls_are_never_seated(server: Server, db_url: str, tmp_path: Path) -> None:
    ghosts = [SyncDevice(server.url) for _ in range(GHOSTS)]
    for g in ghosts:
        g.register()
    ids = [g.device_id for g in ghosts]
    socks = [_open_long_poll(g, server.port) for g in ghosts]
    opened = time.time()
    try:
        _wait_for(lambda: _availability(db_url, ids),
                  lambda got: len(got) == GHOSTS and all(u > opened + LONG_POLL_S / 2 for u in got.values()),
                  deadlines.stretch(60))
    finally:
        for s in socks:
            s.close()  # mid long-poll: the client is gone
    closed = time.monotonic()
    _wait_for(lambda: _availability(db_url, ids), lambda got: all(u == 0.0 for u in got.values()),
              deadlines.stretch(WITHDRAWN_WITHIN_S))
    assert time.monotonic() - closed < LONG_POLL_S / 2, "withdrawn no sooner than the long-polls would have lapsed"

    admin = AnalystClient(server.url, server.token("admin"))
    fleet = Fleet(server.url, 12, tmp_path, seed=29)
    try:
        qid = admin.submit(SPEC)["id"]
        final = admin.wait(qid, timeout_s=180)
        assert final["status"] == "succeeded", final
        truth = fleet.truth()
        res = check_exact(admin, qid, SPEC, truth)
        assert res["result"]["clients"] >= 10
    finally:
        fleet.stop()
    seated = {d for (d,) in _read(db_url, select(CohortMember.device_id))}
    cohorts = [status for (status,) in _read(db_url, select(Cohort.status))]
    assert seated and seated <= set(truth), "a cohort seated a device whose long-poll had closed"
    assert seated.isdisjoint(ids)
    assert cohorts == ["finished"], cohorts  # no ghost cohort that aborted
