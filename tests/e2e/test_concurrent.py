"""Acceptance: two queries running at once on the same fleet both complete exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyst_client.cli import AnalystClient
from tests.e2e.harness import Fleet, Server, check_exact

pytestmark = pytest.mark.e2e

WORDS = {
    "kind": "histogram",
    "source": "words",
    "params": {"buckets": ["moon", "sun", "star"]},
    "cohort": {"min_clients": 30, "max_clients": 60, "phase_timeout_s": 5},
}
SETTINGS = {
    "kind": "histogram",
    "source": "settings",
    "params": {"buckets": ["dark", "light"], "other_bucket": "other"},
    "cohort": {"min_clients": 30, "max_clients": 60, "phase_timeout_s": 5},
}


def test_two_queries_at_once(server: Server, tmp_path: Path) -> None:
    admin = AnalystClient(server.url, server.token("admin"))
    fleet = Fleet(server.url, 120, tmp_path, dropout=0.05, seed=3)
    try:
        a = admin.submit(WORDS)["id"]
        b = admin.submit(SETTINGS)["id"]
        for qid in (a, b):
            final = admin.wait(qid, timeout_s=240)
            assert final["status"] == "succeeded", final
        truth = fleet.truth()
        check_exact(admin, a, WORDS, truth)
        check_exact(admin, b, SETTINGS, truth)
        listed = {q["id"] for q in admin.call("GET", "/v1/queries")["queries"]}
        assert {a, b} <= listed
    finally:
        fleet.stop()
