"""A device that proves one vector and masks another in a noisy round, against a real server process on SQLite and
on PostgreSQL (docs/validation.md, "A failed opening"): its first cohort is refused and its members freed for one
more run of the query (charged and logged); the next cohort tests it among fresh devices and names it; the round
completes from honest devices and `fa audit` finds nothing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from analyst_client.cli import AnalystClient
from tests.bent_device import bend
from tests.e2e.harness import Fleet, Server, audit_clean
from tests.e2e.test_validation_e2e import Cheaters, _metric, _spec

pytestmark = [pytest.mark.e2e, pytest.mark.server_env({"FA_COHORT_FORMATION_WAIT_S": "1"})]


def _until(check: Any, what: str, limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_cheater_masking_another_vector_in_a_noisy_round_is_named(server: Server, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A vote of 1,000 behind a valid proof, in a noisy histogram (docs/validation.md, "A failed opening"): the first
    cohort (the cheater and 2 honest devices) is refused, its members are freed for one more run of the query —
    charged and logged; the honest ones leave, and the next cohort (2 fresh devices and the one suspect left) is
    refused too, which names the cheater; the round completes from honest devices and `fa audit` finds nothing."""
    bend(monkeypatch)
    token = server.token("admin")
    admin = AnalystClient(server.url, token)
    spec = {**_spec(3, 3), "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6}}
    qid = admin.submit(spec)["id"]

    def available() -> int:
        return int(admin.call("GET", "/v1/fleet")["devices_available"])

    def charge() -> dict[str, Any]:
        return next(r for r in admin.call("GET", "/v1/budgets/words/charges")["charges"] if r["query_id"] == qid)

    cheater = Cheaters(server.url, ["vote_1000"])
    fleets: list[Fleet] = []
    try:
        _until(lambda: available() >= 1, "the cheater's check-in")
        fleets.append(Fleet(server.url, 2, tmp_path, seed=51, checkin_wait=1.0))
        _until(lambda: charge()["runs"] == 2, "the first refused sum and its charge for one more run")
        fleets[0].stop()
        _until(lambda: available() == 1, "the first cohort's honest devices to leave")
        fleets.append(Fleet(server.url, 2, tmp_path, seed=52, checkin_wait=1.0))
        _until(lambda: _metric(server, "fa_devices_named_total") >= 1, "the cheater to be named")
        fleets.append(Fleet(server.url, 2, tmp_path, seed=53, checkin_wait=1.0))
        res = admin.wait(qid, timeout_s=180)
        assert res["status"] == "succeeded", res
        out = admin.result(qid)
        listing = admin.call("GET", f"/v1/admin/queries/{qid}/contributors")
    finally:
        cheater.stop()
        for f in fleets:
            f.stop()
    (bent,) = cheater.ids
    assert bent not in listing["rounds"]["0"] and bent in listing["excluded"]
    assert set(listing["rounds"]["0"]) <= set(fleets[1].truth()) | set(fleets[2].truth())
    assert max(out["result"]["counts"].values(), default=0) < 100  # the vote of 1,000 reached no release
    p = out["privacy"]
    assert p["failed_openings"] == 2 and p["runs_charged"] == 2 and p["devices_excluded"] == 1
    assert charge()["epsilon"] == pytest.approx(2.0)
    audit_clean(server.url, token)
