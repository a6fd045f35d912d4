"""Acceptance over HTTP: a histogram with distributed DP (ε = 1, δ = 1e-6) over ≥ 1,000 simulated
devices — every released count within its 99.9 % noise interval around the truth over the contributors,
zero-count buckets suppressed at the configured threshold (Skellam, then the discrete Gaussian), the source's budget refuses a second query
(422 with the remaining budget), a cancelled query is refunded, the ledger is readable over the API and
survives a restart. (The server's policy refusing queries without noise or above its maximum ε needs no
fleet: tests/analytics_server/test_spec_validation.py.)

One server process for the module (ledger state carries from test to test, in order); the fleet runs once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analytics_server import privacy
from analyst_client.cli import AnalystClient, ApiError
from queries.registry import get_kind
from queries.release import release_threshold
from queries.spec import QuerySpec
from tests.e2e.harness import Fleet, Server, expected_result, server_on_fresh_sqlite

pytestmark = pytest.mark.e2e

DEVICES = 1030
T_MIN = 1000
SERVER_ENV = {
    "FA_BUDGET_EPSILON": "1.5",
    "FA_BUDGET_DELTA": "1e-5",
    "FA_REQUIRE_NOISE": "true",
    "FA_MAX_EPSILON_PER_QUERY": "2",
}
UNSEEN = ["never-typed-1", "never-typed-2", "never-typed-3"]


def _spec(mechanism: str, epsilon: float = 1.0) -> dict[str, Any]:
    return {
        "kind": "histogram",
        "name": f"dp words {mechanism}",
        "source": "words",
        "params": {"buckets": ["moon", "sun", "star", "cloud", "rain", "snow", *UNSEEN], "other_bucket": "other",
                   "max_contributions_per_device": 1},
        "privacy": {"mechanism": mechanism, "epsilon": epsilon, "delta": 1e-6},
        # no dropout: all answer first; so the allowance is 2 % (the noise is sized for t_min = 1000 either way) and the
        # server draws a graph of degree 172 at the devices' floor, not 786 (docs/secagg.md); one fleet process
        # computes 1,030 devices × 172 neighbours in a phase
        "cohort": {"min_clients": T_MIN, "max_clients": DEVICES, "phase_timeout_s": 150, "dropout_allowance": 0.02},
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with server_on_fresh_sqlite(tmp_path_factory.mktemp("dp"), env=SERVER_ENV) as srv:
        yield srv


def _refused(client: AnalystClient, spec: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as info:
        client.submit(spec)
    assert info.value.status == 422, info.value
    return info.value.message


def test_dp_histogram_budget_refund_and_restart(server: Server, tmp_path: Path) -> None:
    admin = AnalystClient(server.url, server.token("admin"))
    analyst = AnalystClient(server.url, server.token("analyst"))
    fleet = Fleet(server.url, DEVICES, tmp_path, seed=21, checkin_wait=3.0)
    try:
        spec = _spec("skellam")
        qid = analyst.submit(spec)["id"]
        ledger = analyst.call("GET", "/v1/budgets/words")
        assert (ledger["spent_epsilon"], ledger["remaining_epsilon"], ledger["configured"]) == (1.0, 0.5, False)

        # a second query of the same source does not fit: 422 naming the remaining budget, nothing charged
        msg = _refused(analyst, spec)
        assert "remaining" in msg and "epsilon=0.5" in msg and "'words'" in msg, msg
        assert analyst.call("GET", "/v1/budgets/words")["queries_charged"] == 1

        final = admin.wait(qid, timeout_s=300)
        assert final["status"] == "succeeded", final
        _check_release(admin, qid, spec, fleet.truth())

        # raise the source's total; a query cancelled before any cohort finished is refunded
        view = admin.call("PUT", "/v1/admin/budgets/words", {"epsilon": 3.0, "delta": 1e-5})
        assert (view["total_epsilon"], view["remaining_epsilon"], view["configured"]) == (3.0, 2.0, True)
        with pytest.raises(ApiError) as info:
            analyst.call("PUT", "/v1/admin/budgets/words", {"epsilon": 5.0, "delta": 1e-5})
        assert info.value.status == 403
        # the same release checks with the distributed discrete Gaussian (encoding scale s > 1 at t_min = 1000)
        dg = _spec("discrete_gaussian")
        second = analyst.submit(dg)["id"]
        final = admin.wait(second, timeout_s=300)
        assert final["status"] == "succeeded", final
        _check_release(admin, second, dg, fleet.truth(), spent=2.0)

        third = analyst.submit(spec)["id"]
        assert analyst.call("GET", "/v1/budgets/words")["spent_epsilon"] == 3.0
        analyst.cancel(third)
        after = analyst.call("GET", "/v1/budgets/words")
        assert (after["spent_epsilon"], after["queries_charged"]) == (2.0, 2), after
    finally:
        fleet.stop()

    server.stop()
    server.start()
    again = AnalystClient(server.url, server.token("analyst"))
    assert again.call("GET", "/v1/budgets/words") == after
    listed = again.call("GET", "/v1/budgets")
    assert listed["default_epsilon"] == 1.5 and [b["source"] for b in listed["budgets"]] == ["words"]
    assert again.call("GET", "/v1/budgets/other-source")["remaining_epsilon"] == 1.5


def _check_release(admin: AnalystClient, qid: str, spec: dict[str, Any], truth: dict[str, Any], spent: float = 1.0) -> None:
    res = admin.result(qid)
    block, result = res["privacy"], res["result"]
    ids = admin.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"]["0"]
    n = len(ids)
    assert T_MIN <= n <= DEVICES and result["clients"] == n and block["contributors"] == [n]
    exact = {**spec, "privacy": {"mechanism": "none"}}
    true_counts = expected_result("histogram", exact["params"], "words", truth, ids)["counts"]

    # the noise the server must have used, recomputed from the spec
    # as the server resolved it: the validation mode it settled decides the δ left for the noise
    qspec = QuerySpec.model_validate({**spec, "privacy": {**spec["privacy"], "validation": block["validation"]}})
    kind = get_kind("histogram")
    params = kind.parse_params(spec["params"])
    cal = privacy.check_and_calibrate(qspec, kind, params, "demo")
    plan = kind.plan_round(params, kind.initial_state(params), 0)
    assert plan is not None
    noise = privacy.round_noise(cal, plan)
    assert noise is not None
    mech = spec["privacy"]["mechanism"]
    scale_key = "mu" if mech == "skellam" else "sigma"
    assert block["mechanism"] == mech and block["epsilon"] == 1.0 and block["delta"] == 1e-6
    assert block[scale_key] == pytest.approx(noise.noise.total_scale) and block["t_min"] == T_MIN
    assert block["encoding_scale"] == noise.scale and block["bits"][0] >= 2
    assert block["sensitivity"]["l1"] == noise.scale * 1.0
    assert 0 < block["epsilon_spent"] <= 1.0 + 1e-9
    assert block["source_budget"]["spent_epsilon"] == spent

    halfwidth = privacy.noise_halfwidth(noise, n, 0.999)
    released = result["counts"]
    assert released, result
    errors = {b: abs(c - true_counts[b]) for b, c in released.items()}
    assert max(errors.values()) < halfwidth, (errors, halfwidth)

    tau = release_threshold(privacy.aggregate_noise(noise, n), n, plan.dim, params.false_release_rate, 0)
    assert result["threshold"] == tau and tau > 1
    assert block["thresholds"]["release_threshold"] == tau and block["thresholds"]["min_contributors"] == T_MIN
    for b in UNSEEN:  # zero-count buckets are listed as suppressed, never released
        assert true_counts[b] == 0 and b in result["suppressed"] and b not in released
    assert set(released) | set(result["suppressed"]) == set(true_counts)
    print(f"\nDP e2e {mech}: n={n} {scale_key}={block[scale_key]:.1f} s={block['encoding_scale']} bits={block['bits']} "
          f"tau={tau} max|err|={max(errors.values())} halfwidth={halfwidth} "
          f"ratio={max(errors.values()) / halfwidth:.2f} time={time.strftime('%X')}")
