"""Calibration and accounting against direct dp_accounting computations and the published RDP bounds."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp as dp_rdp

from queries import dp
from queries.dp import rdp

ORDERS_ALL = rdp.all_integer_orders()


def direct_epsilon(z: float, rounds: int, delta: float) -> float:
    acc = dp_rdp.RdpAccountant(orders=list(rdp.ORDERS))
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), rounds))
    return acc.get_epsilon(delta)


@pytest.mark.parametrize(("epsilon", "delta", "rounds"), [(1.0, 1e-6, 1), (0.3, 1e-8, 1), (2.0, 1e-8, 10), (8.0, 1e-5, 50)])
def test_calibration_inverts_the_accountant(epsilon, delta, rounds):
    cal = dp.calibrate_query("skellam", epsilon, delta, rounds, t_min=100)
    z = cal.noise_multiplier
    assert direct_epsilon(z, rounds, delta) == pytest.approx(epsilon, rel=1e-6)
    assert direct_epsilon(z, rounds, delta) <= epsilon
    assert direct_epsilon(z * 0.999, rounds, delta) > epsilon  # smallest such z
    assert dp.epsilon_spent(cal, rounds) == pytest.approx(direct_epsilon(z, rounds, delta), rel=1e-12)


def test_epsilon_spent_composes_over_rounds_like_dp_accounting():
    cal = dp.calibrate_query("discrete_gaussian", 3.0, 1e-7, 12, t_min=10)
    spent = [dp.epsilon_spent(cal, r) for r in range(0, 13)]
    assert spent[0] == 0.0
    assert all(a < b for a, b in zip(spent, spent[1:]))
    for r in (1, 5, 12):
        assert spent[r] == pytest.approx(direct_epsilon(cal.noise_multiplier, r, 1e-7), rel=1e-12)
    assert spent[12] == pytest.approx(3.0, rel=1e-6)
    with pytest.raises(dp.PrivacyError, match="rounds_run"):
        dp.epsilon_spent(cal, 13)


def test_compose_rdp_matches_one_accountant_and_beats_basic_composition():
    a = dp.calibrate_query("skellam", 1.0, 1e-6, 3, t_min=10)
    b = dp.calibrate_query("skellam", 0.5, 1e-6, 1, t_min=10)
    acc = dp_rdp.RdpAccountant(orders=list(rdp.ORDERS))
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(a.noise_multiplier), 3))
    acc.compose(dp_accounting.GaussianDpEvent(b.noise_multiplier))
    tight = dp.compose_rdp([(a, 3), (b, 1)], 2e-6)
    assert tight == pytest.approx(acc.get_epsilon(2e-6), rel=1e-12)
    assert tight < dp.compose_costs([(1.0, 1e-6), (0.5, 1e-6)]).epsilon


@pytest.mark.parametrize("t_min", [1, 10, 1000])
@pytest.mark.parametrize(("l1", "l2"), [(1.0, 1.0), (10.0, math.sqrt(10)), (256.0, 64.0)])
def test_skellam_round_noise_meets_the_agarwal_kairouz_liu_bound(t_min, l1, l2):
    cal = dp.calibrate_query("skellam", 1.0, 1e-6, 4, t_min)
    noise = dp.round_noise(cal, l1, l2)
    z = cal.noise_multiplier
    mu = noise.total_scale
    own = rdp.skellam_rdp(ORDERS_ALL, l1, l2, mu)
    assert np.all(own <= ORDERS_ALL / (2 * z * z) * (1 + 1e-9))
    # minimal: 1 % less variance breaks the bound at some order
    assert np.any(rdp.skellam_rdp(ORDERS_ALL, l1, l2, 0.99 * mu) > ORDERS_ALL / (2 * z * z))
    # explicit formula at α = 2 (μ = variance): 2Δ2²/(2μ) + min((3Δ2² + 6Δ1)/(4μ²), 3Δ1/(2μ))
    assert own[0] == pytest.approx(l2 * l2 / mu + min((3 * l2 * l2 + 6 * l1) / (4 * mu * mu), 3 * l1 / (2 * mu)))
    # the actual mechanism over all rounds stays within the target ε
    grid = np.array(rdp.ORDERS) - 2
    assert rdp.epsilon_of_curve(4 * own[grid], 1e-6) <= 1.0 + 1e-9
    assert noise.per_device_scale == pytest.approx(mu / t_min)
    assert noise.inflation >= 1.0


@pytest.mark.parametrize("t_min", [1, 10, 300])
def test_discrete_gaussian_round_noise_accounts_for_the_sum_slack(t_min):
    cal = dp.calibrate_query("discrete_gaussian", 2.0, 1e-6, 2, t_min)
    z = cal.noise_multiplier
    noise = dp.round_noise(cal, 4.0, 2.0)
    sigma_dev = noise.per_device_scale
    own = rdp.ddg_rdp(ORDERS_ALL, 4.0, 2.0, sigma_dev, t_min, None)
    assert np.all(own <= ORDERS_ALL / (2 * z * z) * (1 + 1e-9))
    assert noise.total_scale == pytest.approx(sigma_dev * math.sqrt(t_min))
    if t_min == 1:  # a single discrete Gaussian: CKS's ½(Δ2/σ)² zCDP, no slack
        assert rdp.ddg_tau(sigma_dev, 1) == 0.0
        assert noise.total_scale == pytest.approx(z * 2.0, rel=1e-6)
    else:
        assert rdp.ddg_tau(sigma_dev, t_min) > 0
        assert noise.total_scale >= z * 2.0
    assert sigma_dev >= 0.5


def test_ddg_tau_formula():
    sigma, n = 0.9, 5
    expected = 10 * sum(math.exp(-2 * math.pi**2 * sigma**2 * k / (k + 1)) for k in range(1, n))
    assert rdp.ddg_tau(sigma, n) == pytest.approx(expected, rel=1e-12)


def test_large_t_min_discrete_gaussian_needs_scaling_and_suggest_scale_finds_it():
    cal = dp.calibrate_query("discrete_gaussian", 1.0, 1e-6, 1, 2000)
    assert dp.round_noise(cal, 1, 1).inflation > 2  # τ slack dominates when σ_dev < ~0.8
    s = dp.suggest_scale(cal, 1, 1)
    assert dp.round_noise(cal, s, s).inflation <= 1.02
    assert s == 1 or dp.round_noise(cal, s // 2, s // 2).inflation > 1.02


def test_subsampled_reference_is_valid_and_above_the_tight_gaussian():
    z, q = 2.0, 0.05
    tight = rdp.gaussian_curve(z, q)  # dp_accounting, only valid for Gaussian noise
    general = rdp.reference_curve(z, q)  # Zhu–Wang bound of α/(2z²)
    assert np.all(general >= tight * (1 - 1e-9))
    assert np.all(general <= rdp.gaussian_curve(z) * (1 + 1e-12))  # never worse than no sampling
    assert np.allclose(rdp.reference_curve(z, 1.0), np.array(rdp.ORDERS) / (2 * z * z))
    cal = dp.calibrate_query("skellam", 1.0, 1e-6, 10, 50, sample_rate=q)
    assert rdp.epsilon_of_curve(10 * rdp.reference_curve(cal.noise_multiplier, q), 1e-6) == pytest.approx(1.0, rel=1e-6)
    noise = dp.round_noise(cal, 1.0, 1.0)
    own = rdp.subsampled_curve(lambda o: rdp.skellam_rdp(o, 1.0, 1.0, noise.total_scale), q)
    assert np.all(own <= cal.round_curve() * (1 + 1e-9))


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"epsilon": -1}, "privacy.epsilon"),
    ({"epsilon": float("inf")}, "privacy.epsilon"),
    ({"delta": 0}, "privacy.delta"),
    ({"delta": 1.5}, "privacy.delta"),
    ({"rounds": 0}, "rounds"),
    ({"t_min": 0}, "t_min"),
    ({"sample_rate": 1.5}, "sample_rate"),
    ({"mechanism": "none"}, "privacy.mechanism"),
    ({"mechanism": "laplace"}, "privacy.mechanism"),
    ({"epsilon": 1e-7, "delta": 1e-12, "rounds": 1000}, "privacy.epsilon"),
])
def test_bad_specs_name_the_field(kwargs, field):
    args = {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6, "rounds": 1, "t_min": 10} | kwargs
    with pytest.raises(dp.PrivacyError, match=field.replace(".", r"\.")):
        dp.calibrate_query(**args)


def test_round_noise_rejects_bad_sensitivities():
    cal = dp.calibrate_query("skellam", 1.0, 1e-6, 1, 10)
    with pytest.raises(dp.PrivacyError, match="l1_sensitivity"):
        dp.round_noise(cal, 0, 1)
    with pytest.raises(dp.PrivacyError, match="l2_sensitivity"):
        dp.round_noise(cal, 1, 2)


def test_dict_round_trips():
    cal = dp.calibrate_query("discrete_gaussian", 1.0, 1e-6, 3, 20, 0.5)
    assert dp.QueryCalibration.from_dict(cal.to_dict()) == cal
    noise = dp.round_noise(cal, 2, 1.5)
    assert dp.RoundNoise.from_dict(noise.to_dict()) == noise
    with pytest.raises(dp.PrivacyError, match="calibration.noise_multiplier"):
        dp.QueryCalibration.from_dict({k: v for k, v in cal.to_dict().items() if k != "noise_multiplier"})
    # bad stored data: a typed error naming the field, never KeyError/TypeError
    with pytest.raises(dp.PrivacyError, match="calibration: must be an object"):
        dp.QueryCalibration.from_dict([1, 2])
    for name, bad in (("epsilon", "1"), ("delta", -1e-6), ("rounds", 2.5), ("t_min", 0), ("sample_rate", None),
                      ("noise_multiplier", float("nan")), ("mechanism", "laplace")):
        with pytest.raises(dp.PrivacyError, match=f"{name}"):
            dp.QueryCalibration.from_dict({**cal.to_dict(), name: bad})
    assert noise.task_block() == {"mechanism": "discrete_gaussian", "scale": noise.per_device_scale,
                                  "std": noise.per_device_std}
