"""Acceptance: a histogram over HTTP with ≥ 200 simulated devices, 10 % dropping at random phases, equals
the ground truth over the devices that contributed, exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyst_client.cli import AnalystClient
from tests.e2e.harness import Fleet, Server, audit_clean, check_exact

pytestmark = pytest.mark.e2e

SPEC = {
    "kind": "histogram",
    "name": "e2e words",
    "source": "words",
    "params": {"buckets": ["moon", "sun", "star", "cloud", "rain", "snow", "river"], "other_bucket": "other",
               "max_contributions_per_device": 2},
    "privacy": {"mechanism": "none"},
    # 10 % drop: the default allowance (15 %) covers them, a complete graph at the floor (220 × 219 pairs per phase)
    "cohort": {"min_clients": 150, "max_clients": 1000, "phase_timeout_s": 35},
}


def test_histogram_220_devices_with_dropout(server: Server, tmp_path: Path) -> None:
    admin = AnalystClient(server.url, server.token("admin"))
    fleet = Fleet(server.url, 220, tmp_path, dropout=0.1, seed=11)
    try:
        created = AnalystClient(server.url, server.token("analyst")).submit(SPEC)
        assert created["status"] in ("pending", "running")
        final = admin.wait(created["id"], timeout_s=420)
        assert final["status"] == "succeeded", final
        res = check_exact(admin, created["id"], SPEC, fleet.truth())
        assert 150 <= res["result"]["clients"] < 220  # dropouts at phases before masked input are excluded
        assert final["progress"]["contributors"] == res["result"]["clients"]
        audit_clean(server.url, server.token("admin"))
        # the served process runs uvloop's event loop (the server extra installs it) and froze its startup heap
        # out of garbage collection once startup was complete
        log = server.log_path.read_text(errors="replace")
        assert "event loop: uvloop" in log and "startup heap frozen" in log
    finally:
        fleet.stop()
