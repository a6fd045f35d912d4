"""Round weights: a round of weight w spends w unit rounds of the query's budget (the Gaussian reference with
multiplier z/√w), rounds whose weights sum to the calibrated count stay within (ε, δ) by dp_accounting's own
composition, and the stored noise (`PlannedNoise`) round-trips, old rows included."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp as dp_rdp

from queries import dp
from queries.dp import rdp
from queries.kind import RoundPlan


def _epsilon_of_events(multipliers: list[float], delta: float) -> float:
    acc = dp_rdp.RdpAccountant(orders=list(rdp.ORDERS))
    for z in multipliers:
        acc.compose(dp_accounting.GaussianDpEvent(z))
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("weights", [[0.3, 1.62, 1.08], [1.0, 1.0, 1.0], [0.1, 2.9], [2.0]])
def test_weighted_rounds_compose_to_the_calibrated_epsilon(weights: list[float]) -> None:
    rounds = round(sum(weights))
    cal = dp.calibrate_query("skellam", 1.0, 1e-6, rounds=rounds, t_min=100)
    noises = [dp.round_noise(cal, 1.0, 1.0, weight=w) for w in weights]
    for w, n in zip(weights, noises):
        assert n.weight == w and n.noise_multiplier == pytest.approx(cal.noise_multiplier / math.sqrt(w))
    # each round's reference Gaussian, composed by dp_accounting itself, spends the query's ε
    assert _epsilon_of_events([n.noise_multiplier for n in noises], 1e-6) == pytest.approx(1.0, rel=1e-6)
    assert dp.epsilon_spent(cal, sum(weights)) == pytest.approx(1.0, rel=1e-6)
    if len(weights) > 1:
        assert dp.epsilon_spent(cal, weights[0]) < dp.epsilon_spent(cal, sum(weights))


def test_a_lighter_round_gets_proportionally_more_noise() -> None:
    cal = dp.calibrate_query("skellam", 1.0, 1e-6, rounds=3, t_min=1000)
    full, light = dp.round_noise(cal, 1.0, 1.0), dp.round_noise(cal, 1.0, 1.0, weight=0.3)
    assert light.std(1000) / full.std(1000) == pytest.approx(math.sqrt(1 / 0.3), rel=0.02)


def test_weights_are_checked() -> None:
    cal = dp.calibrate_query("skellam", 1.0, 1e-6, rounds=2, t_min=10)
    with pytest.raises(dp.PrivacyError, match="privacy_weight"):
        dp.round_noise(cal, 1.0, 1.0, weight=2.5)
    with pytest.raises(dp.PrivacyError, match="privacy_weight"):
        dp.round_noise(cal, 1.0, 1.0, weight=0.0)
    sampled = dp.calibrate_query("skellam", 1.0, 1e-6, rounds=2, t_min=10, sample_rate=0.5)
    with pytest.raises(dp.PrivacyError, match="privacy_weight"):
        dp.round_noise(sampled, 1.0, 1.0, weight=0.5)
    with pytest.raises(dp.PrivacyError, match="rounds_run"):
        dp.epsilon_spent(sampled, 0.5)


def test_planned_noise_round_trips_and_old_rows_load_with_weight_one() -> None:
    cal = dp.calibrate_query("discrete_gaussian", 1.0, 1e-6, rounds=3, t_min=1000)
    plan = RoundPlan(round=0, task={}, dim=4, max_abs=1, l1_sensitivity=1.0, l2_sensitivity=1.0, privacy_weight=0.3)
    planned = dp.plan_noise(cal, plan)
    assert planned.scale > 1 and planned.noise.weight == 0.3  # large t_min: the encoding scale keeps σ_dev up
    again = dp.PlannedNoise.from_dict(planned.to_dict())
    assert again == planned
    old = {k: v for k, v in planned.to_dict().items() if k != "weight"}
    assert dp.PlannedNoise.from_dict(old).noise.weight == 1.0
    agg = np.array([10 * planned.scale, 3 * planned.scale + planned.scale // 2, 0, -planned.scale])
    assert planned.unscale(agg).tolist() == [10, 4, 0, -1]
    assert planned.aggregate_noise(1000).std == pytest.approx(planned.std_released(1000))


def test_privacy_block_reports_the_split() -> None:
    from analytics_server import privacy
    from queries.spec import QuerySpec

    spec = QuerySpec(kind="feature_stats", source="s", params={}, privacy={"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
                     cohort={"min_clients": 100, "max_clients": 200})
    cal = dp.calibrate_query("skellam", 1.0, 1e-6, rounds=3, t_min=100)
    plans = [RoundPlan(round=i, task={}, dim=3, max_abs=1, l1_sensitivity=1.0, l2_sensitivity=1.0, privacy_weight=w,
                       purpose=p) for i, (w, p) in enumerate([(0.3, "bound"), (1.62, "means"), (1.08, "variances")])]
    noises = [privacy.round_noise(cal, p) for p in plans]
    block = privacy.privacy_block(spec, cal, noises, [150] * 3, [20] * 3, {}, None, [p.purpose for p in plans])
    assert block["epsilon_spent"] == pytest.approx(1.0, rel=1e-6)
    assert [e["purpose"] for e in block["noise"]] == ["bound", "means", "variances"]
    assert [round(e["budget_share"], 2) for e in block["budget_split"]] == [0.1, 0.54, 0.36]
    assert block["budget_split"][0]["epsilon_alone"] < block["budget_split"][1]["epsilon_alone"] < 1.0
