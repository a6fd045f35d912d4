"""The device's noise floor (`queries.dp.floor`): never above what the server's calibration plans (so an honest
server is never refused), yet close to it (so a server cannot shrink the noise by much); the analytic
Gaussian profile itself against a known value and against the Gaussian's exact tails."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics_server import privacy
from queries import dp
from queries.dp.floor import gaussian_delta, gaussian_floor, per_device_floor
from queries.kind import RoundPlan


def test_single_release_matches_the_analytic_gaussian_mechanism() -> None:
    """Balle–Wang: at ε = 1, δ = 1e-5 the smallest σ/Δ is ≈ 3.73 (the classical 2 ln(1.25/δ)/ε bound says 4.84)."""
    z = gaussian_floor(1.0, 1e-5)
    assert z == pytest.approx(3.7307, abs=1e-3)
    assert gaussian_delta(1.0, z) == pytest.approx(1e-5, rel=1e-6)
    assert gaussian_floor(1.0, 1e-5, rounds=4) == pytest.approx(2 * z)  # composition: √rounds


@settings(max_examples=60, deadline=None)
@given(z=st.floats(0.05, 50), eps=st.floats(0.01, 30))
def test_gaussian_delta_is_the_exact_privacy_profile(z: float, eps: float) -> None:
    """δ(ε) = P[L > ε] − e^ε P[L' > ε] for the privacy loss L ~ N(μ²/2, μ²), μ = 1/z, written with erfc."""
    mu = 1 / z
    tail = lambda x: 0.5 * math.erfc(x / math.sqrt(2))  # noqa: E731
    expected = tail((eps - mu * mu / 2) / mu) - math.exp(eps) * tail((eps + mu * mu / 2) / mu)
    assert gaussian_delta(eps, z) == pytest.approx(max(expected, 0.0), rel=1e-9, abs=1e-300)


@settings(max_examples=40, deadline=None)
@given(
    mechanism=st.sampled_from(["discrete_gaussian", "skellam"]),
    eps=st.floats(0.1, 10),
    log_delta=st.floats(-10, -3),
    rounds=st.integers(1, 30),
    t_min=st.integers(2, 2000),
    k=st.integers(1, 50),
    fixed=st.booleans(),
    weight=st.sampled_from([1.0, 0.3, 1.62]),
)
def test_the_floor_never_refuses_the_servers_calibration(
    mechanism: str, eps: float, log_delta: float, rounds: int, t_min: int, k: int, fixed: bool, weight: float
) -> None:
    """For every calibration the server makes (fitted to the rounds, or the analyst's own z run for the rounds it
    affords) and every round it plans, the per-device noise it sends is at or above the device's floor, and the
    floor is at least 80 % of a fitted calibration's σ (a server cannot shrink the noise by more than the accountant's slack)."""
    delta = 10.0**log_delta
    cal = dp.calibrate_query(mechanism, eps, delta, rounds=rounds, t_min=t_min)
    if fixed:  # the analyst fixes z a little above the fitted one: fewer rounds' worth of ε each
        cal = dp.fixed_calibration(mechanism, eps, delta, cal.noise_multiplier * 1.3, rounds, t_min)
    if fixed or weight > rounds:
        weight = 1.0  # round weights (a kind's uneven split of the budget) come with a fitted calibration
    plan = RoundPlan(round=0, task={}, dim=k + 1, max_abs=1, l1_sensitivity=float(k), l2_sensitivity=math.sqrt(k),
                     privacy_weight=weight)
    noise = privacy.round_noise(cal, plan)
    assert noise is not None
    block = privacy.assignment_privacy(_spec(fixed), cal, plan, rounds)
    floor = per_device_floor(mechanism, block["epsilon"], block["delta"], block["rounds"], block["t_min"],
                             plan.l2_sensitivity, noise.scale, block["weight"])
    assert noise.noise.per_device_scale >= floor
    if not fixed:  # (an analyst's larger z is simply more noise than needed)
        ratio = floor / noise.noise.per_device_scale
        assert ratio >= (0.8 if mechanism == "discrete_gaussian" else 0.8**2), (ratio, noise.noise.inflation)


def _spec(fixed: bool):  # type: ignore[no-untyped-def]
    class Privacy:
        noise_multiplier = 1.0 if fixed else None

    class Spec:
        privacy = Privacy()

    return Spec()


@pytest.mark.parametrize("bad", [{"epsilon": 0}, {"epsilon": float("inf")}, {"delta": 1}, {"delta": 0},
                                 {"rounds": 0}, {"t_min": 0}, {"l2_sensitivity": -1}, {"mechanism": "none"}])
def test_bad_parameters_name_the_field(bad: dict[str, object]) -> None:
    args = {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6, "rounds": 1, "t_min": 10, "l2_sensitivity": 1.0, **bad}
    with pytest.raises(dp.PrivacyError, match=next(iter(bad))):
        per_device_floor(**args)  # type: ignore[arg-type]
