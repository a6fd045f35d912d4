"""The analyst-fixed noise multiplier (privacy.noise_multiplier): calibration, rounds that fit ε, the
server's per-round budget check, and the spec/field errors."""

from __future__ import annotations

import pydantic
import pytest

from analytics_server import privacy
from queries import dp
from queries.registry import get_kind
from queries.spec import QuerySpec

TRAIN = {"model": {"name": "logistic", "n_features": 3}, "rounds": 20, "eval_every": 0}


def _spec(**priv: object) -> QuerySpec:
    return QuerySpec(kind="training", source="examples", params=TRAIN,
                     privacy={"mechanism": "discrete_gaussian", "epsilon": 4.0, "delta": 1e-5, **priv},
                     cohort={"min_clients": 20})


def test_rounds_affordable_is_the_last_round_within_epsilon() -> None:
    cal = dp.fixed_calibration("discrete_gaussian", 4.0, 1e-5, 1.5, rounds=20, t_min=20)
    k = dp.rounds_affordable(cal)
    assert 1 <= k < 20
    assert dp.epsilon_spent(cal, k) <= 4.0 < dp.epsilon_spent(cal, k + 1)
    big = dp.fixed_calibration("discrete_gaussian", 4.0, 1e-5, 50.0, rounds=20, t_min=20)
    assert dp.rounds_affordable(big) == 20  # everything fits: never stops early


def test_fixed_calibration_refuses_a_multiplier_too_small_for_one_round() -> None:
    with pytest.raises(dp.PrivacyError, match="privacy.noise_multiplier"):
        dp.fixed_calibration("discrete_gaussian", 0.5, 1e-5, 0.1, rounds=5, t_min=10)
    with pytest.raises(dp.PrivacyError, match="privacy.noise_multiplier"):
        dp.fixed_calibration("skellam", 1.0, 1e-5, -1.0, rounds=5, t_min=10)


def test_server_calibrates_with_the_analysts_multiplier_and_checks_each_round() -> None:
    kind = get_kind("training")
    spec = _spec(noise_multiplier=1.5)
    params = kind.parse_params(spec.params)
    cal = privacy.check_and_calibrate(spec, kind, params, "demo")
    assert cal is not None and cal.noise_multiplier == 1.5 and cal.rounds == kind.rounds_upper_bound(params)
    k = dp.rounds_affordable(cal)
    assert privacy.budget_allows(cal, k) and not privacy.budget_allows(cal, k + 1)
    assert privacy.budget_allows(None, 10**6)  # no noise: no budget to check


def test_without_multiplier_every_bounded_round_fits() -> None:
    kind = get_kind("training")
    spec = _spec()
    params = kind.parse_params(spec.params)
    cal = privacy.check_and_calibrate(spec, kind, params, "demo")
    assert cal is not None
    bound = kind.rounds_upper_bound(params)
    assert privacy.budget_allows(cal, bound) and not privacy.budget_allows(cal, bound + 1)


def test_too_small_multiplier_is_a_policy_error_naming_the_field() -> None:
    kind = get_kind("training")
    spec = _spec(noise_multiplier=0.05)
    with pytest.raises(privacy.PrivacyPolicyError, match="privacy.noise_multiplier"):
        privacy.check_and_calibrate(spec, kind, kind.parse_params(spec.params), "demo")


def test_multiplier_without_noise_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="noise_multiplier"):
        QuerySpec(kind="training", source="x", params=TRAIN, privacy={"mechanism": "none", "noise_multiplier": 1.0})
