"""Acceptance: the server is killed with SIGKILL mid-round and restarted; the query completes exactly."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from analyst_client.cli import AnalystClient
from tests.e2e.harness import RESTART_ENV, Fleet, Server, audit_clean, check_exact

pytestmark = pytest.mark.e2e

SPEC = {
    "kind": "histogram",
    "source": "settings",
    "params": {"buckets": ["dark", "light", "system"]},
    "cohort": {"min_clients": 60, "max_clients": 500, "phase_timeout_s": 5},
}
MID_ROUND = ("share_keys", "masked_input", "unmasking")


def _sync_url(url: str) -> str:
    return url.replace("+aiosqlite", "").replace("+asyncpg", "+psycopg") if url.startswith("sqlite") else url


@pytest.mark.server_env(RESTART_ENV)
def test_sigkill_mid_round_then_exact(server: Server, tmp_path: Path) -> None:
    admin_token = server.token("admin")
    admin = AnalystClient(server.url, admin_token)
    fleet = Fleet(server.url, 100, tmp_path, dropout=0.1, seed=5)
    try:
        qid = admin.submit(SPEC)["id"]
        deadline = time.monotonic() + 120
        while True:
            st = admin.status(qid)
            if st["progress"]["phase"] in MID_ROUND:
                break
            assert st["status"] == "running" or st["status"] == "pending", st
            assert time.monotonic() < deadline, "no cohort reached a mid-round phase"
            time.sleep(0.05)
        state = tmp_path / "audit.json"
        before = audit_clean(server.url, admin_token, state)
        server.kill9()
        server.start()
        final = admin.wait(qid, timeout_s=240)
        assert final["status"] == "succeeded", final
        check_exact(admin, qid, SPEC, fleet.truth())
        # the log survived the kill: it extends the head audited before it, and its history is honest
        after = audit_clean(server.url, admin_token, state)
        assert after.head is not None and before.head is not None and after.head.size > before.head.size
        cohorts = admin.call("GET", f"/v1/queries/{qid}")["progress"]["cohorts"]
        assert cohorts.get("aborted", 0) >= 1 and cohorts.get("finished") == 1, cohorts
        if server.db_url.startswith("sqlite"):
            eng = create_engine(_sync_url(server.db_url))
            with eng.connect() as c:
                reasons = [r for (r,) in c.execute(text("SELECT reason FROM cohorts WHERE status = 'aborted'"))]
            eng.dispose()
            assert "server restarted" in reasons
    finally:
        fleet.stop()
