"""Over HTTP: a noisy histogram whose cohort is four times its min_clients sizes every device's share for that
cohort (n less the dropout allowance), not for min_clients — the assignment a device receives says so and carries
the smaller share, the result reports each cohort's sizing, and the released noise std is within 1.1× of what the
contributors need (it would be ≈ 2× with shares sized for min_clients). The released counts stay within their
intervals around the truth over the contributors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analyst_client.cli import AnalystClient
from analytics_server import privacy
from queries import dp
from queries.registry import get_kind
from queries.spec import QuerySpec
from tests.e2e.harness import Fleet, Server, SyncDevice, expected_result

pytestmark = pytest.mark.e2e

T_MIN, DEVICES = 40, 160
SPEC: dict[str, Any] = {
    "kind": "histogram", "name": "cohort-sized noise", "source": "words",
    "params": {"buckets": ["moon", "sun", "star", "cloud", "rain", "snow", "river"], "other_bucket": "other",
               "max_contributions_per_device": 1},
    "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
    "cohort": {"min_clients": T_MIN, "max_clients": DEVICES, "phase_timeout_s": 30},
}


def _noise(block: dict[str, Any]) -> tuple[dp.QueryCalibration, Any, dp.PlannedNoise]:
    """The query's calibration, round plan and stored round noise, recomputed from the spec as the server resolved it."""
    qspec = QuerySpec.model_validate({**SPEC, "privacy": {**SPEC["privacy"], "validation": block["validation"]}})
    kind = get_kind("histogram")
    params = kind.parse_params(SPEC["params"])
    cal = privacy.check_and_calibrate(qspec, kind, params, "demo")
    assert cal is not None
    plan = kind.plan_round(params, kind.initial_state(params), 0)
    stored = privacy.round_noise(cal, plan, qspec)
    assert plan is not None and stored is not None
    return cal, plan, stored


def test_shares_are_sized_for_the_cohort_not_for_min_clients(server: Server, tmp_path: Path) -> None:
    admin = AnalystClient(server.url, server.token("admin"))
    watcher = SyncDevice(server.url)  # a member that reads its assignment, then drops out (within the allowance)
    watcher.register()
    fleet = Fleet(server.url, DEVICES - 1, tmp_path, seed=17)
    try:
        qid = AnalystClient(server.url, server.token("analyst")).submit(SPEC)["id"]
        seen = watcher.checkin_until_assigned(120)
        final = admin.wait(qid, timeout_s=300)
        assert final["status"] == "succeeded", final
        answer = admin.result(qid)
        truth = fleet.truth()
    finally:
        fleet.stop()
    block, result = answer["privacy"], answer["result"]
    cal, plan, planned = _noise(block)

    n = seen["secagg"]["n"]
    t_c = dp.cohort_threshold(T_MIN, n, 0.15)
    assert n > 2 * T_MIN and seen["privacy"]["t_min"] == t_c > 2 * T_MIN
    assert seen["noise"]["scale"] == pytest.approx(dp.cohort_noise(cal, plan, planned, t_c).noise.per_device_scale)
    assert seen["noise"]["scale"] < planned.noise.per_device_scale / 2  # not the min_clients-sized share

    (entry,) = block["noise"]
    contributors = result["clients"]
    assert entry["cohorts"] == [{"devices": n, "contributors": contributors, "shares_sized_for": t_c}]
    assert t_c <= contributors < n  # the watcher never answered
    needed = dp.cohort_noise(cal, plan, planned, contributors).std_released(contributors)
    assert entry["noise_std_released"] == pytest.approx(
        dp.cohort_noise(cal, plan, planned, t_c).std_released(contributors))
    assert entry["noise_std_released"] / needed <= 1.1
    assert planned.std_released(contributors) / needed > 1.8  # what min_clients-sized shares would have released

    ids = admin.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"]["0"]
    true_counts = expected_result("histogram", SPEC["params"], "words", truth, ids)["counts"]
    halfwidth = 4.5 * entry["noise_std_released"]  # P(|N| > 4.5 σ) < 1e-5 per released count
    for bucket, count in result["counts"].items():
        assert abs(count - true_counts[bucket]) < halfwidth, (bucket, count, true_counts[bucket], halfwidth)
