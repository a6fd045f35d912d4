"""Unit tests of the training math: model gradients, finite differences, optimiser steps, safeguards."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queries.training.finite_diff import FiniteDifferenceError, central_gradient
from queries.training.models import build_model
from queries.training.optimizers import adam_step, apply_safeguards, fedavg_step, rprop_step
from queries.training.params import AdamSpec, FedAvgSpec, RPropSpec

MODELS = [
    {"name": "logistic", "n_features": 4, "l2": 0.1},
    {"name": "linear", "n_features": 4, "l2": 0.1},
    {"name": "softmax", "n_features": 4, "n_classes": 3, "l2": 0.1},
    {"name": "mlp", "n_features": 4, "n_classes": 3, "hidden": 5, "activation": "tanh", "l2": 0.1},
    {"name": "mlp", "n_features": 4, "n_classes": 3, "hidden": 5, "activation": "relu", "l2": 0.0},
]


@pytest.mark.parametrize("spec", MODELS, ids=lambda s: f"{s['name']}-{s.get('activation', '')}")
def test_model_gradient_matches_finite_differences(spec):
    rng = np.random.default_rng(0)
    model = build_model(spec)
    X = rng.normal(size=(7, 4))
    k = model.n_classes or 0
    y = rng.integers(0, k, size=7).astype(float) if k else rng.normal(size=7)
    sw = rng.uniform(0.5, 2.0, size=7)
    theta = rng.normal(scale=0.5, size=model.n_params)
    _, grad = model.loss_grad(theta, X, y, sw)
    numeric = central_gradient(lambda t: model.loss_grad(t, X, y, sw)[0], theta, step=1e-6)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)
    # the unweighted loss is the mean of the per-example losses plus the penalty
    loss, _ = model.loss_grad(theta, X, y)
    penalty = loss - model.per_example_loss(theta, X, y).mean()
    assert penalty >= -1e-12 and (spec["l2"] > 0 or abs(penalty) < 1e-12)


def test_central_gradient_on_smooth_function():
    def f(x):
        return float(np.sin(x[0]) * x[1] ** 2 + np.exp(0.3 * x[2]) + 0.01 * x[3] ** 2)

    x = np.array([0.7, -1.3, 2.0, 150.0])
    exact = np.array([np.cos(x[0]) * x[1] ** 2, 2 * np.sin(x[0]) * x[1], 0.3 * np.exp(0.3 * x[2]), 0.02 * x[3]])
    np.testing.assert_allclose(central_gradient(f, x, step=1e-5), exact, rtol=1e-6)
    # central differences: the truncation error shrinks like h² (a forward difference would give ~10×)
    err = [np.abs(central_gradient(f, x, step=h)[:3] - exact[:3]).max() for h in (1e-2, 1e-3)]
    assert 50 < err[0] / err[1] < 200
    with pytest.raises(FiniteDifferenceError, match="step"):
        central_gradient(f, x, step=0.0)
    with pytest.raises(FiniteDifferenceError, match="not finite"):
        central_gradient(lambda t: float("nan"), x)


def test_fedavg_step_by_hand():
    theta, delta = np.array([1.0, -2.0]), np.array([0.5, 0.25])
    np.testing.assert_allclose(fedavg_step(theta, delta, FedAvgSpec(name="fedavg", lr=2.0)), [2.0, -1.5])


def test_adam_step_by_hand():
    spec = AdamSpec(name="adam", lr=0.1, beta1=0.9, beta2=0.99, tau=0.01)
    theta, delta = np.array([1.0, 0.0]), np.array([0.2, -0.4])
    new, state = adam_step(theta, delta, spec, {"m": [0.0, 0.0], "v": [0.0, 0.0], "t": 0})
    m = 0.1 * delta
    v = 0.01 * delta**2
    np.testing.assert_allclose(state["m"], m)
    np.testing.assert_allclose(state["v"], v)
    np.testing.assert_allclose(new, theta + 0.1 * m / (np.sqrt(v) + 0.01))
    # second step with bias correction
    spec_bc = AdamSpec(name="adam", lr=0.1, beta1=0.9, beta2=0.99, tau=0.01, bias_correction=True)
    new2, state2 = adam_step(new, delta, spec_bc, state)
    m2, v2 = 0.9 * m + 0.1 * delta, 0.99 * v + 0.01 * delta**2
    expect = new + 0.1 * (m2 / (1 - 0.9**2)) / (np.sqrt(v2 / (1 - 0.99**2)) + 0.01)
    np.testing.assert_allclose(new2, expect)
    assert state2["t"] == 2


def test_rprop_rules():
    spec = RPropSpec(name="rprop", increase=1.2, decrease=0.5, step_min=0.01, step_max=1.0)
    state = {"step": [0.1, 0.1, 0.1, 0.9, 0.015, 0.1], "prev_sign": [1.0, 1.0, 1.0, 1.0, -1.0, 0.0]}
    theta = np.zeros(6)
    direction = np.array([3.0, -2.0, 0.0, 5.0, 1.0, -7.0])
    new, st2 = rprop_step(theta, direction, spec, state, step_max=1.0)
    # same sign → grow; flipped → shrink; zero → keep (and no move); grow capped at max; shrink floored at min;
    # previous zero → keep
    np.testing.assert_allclose(st2["step"], [0.12, 0.05, 0.1, 1.0, 0.01, 0.1])
    np.testing.assert_allclose(new, [0.12, -0.05, 0.0, 1.0, 0.01, -0.1])
    assert st2["prev_sign"] == [1.0, -1.0, 0.0, 1.0, 1.0, -1.0]
    # the magnitude of the aggregate is ignored
    new_big, _ = rprop_step(theta, direction * 1e6, spec, state, step_max=1.0)
    np.testing.assert_allclose(new_big, new)
    # per-weight maximum steps
    _, st3 = rprop_step(theta, direction, spec, state, step_max=np.array([0.11, 1, 1, 0.95, 1, 1]))
    assert st3["step"][0] == pytest.approx(0.11) and st3["step"][3] == pytest.approx(0.95)


def _feasible_old(draw_vals, groups, nonneg):
    old = np.array(draw_vals, dtype=float)
    old[nonneg] = np.abs(old[nonneg])
    for idx in groups:
        old[idx] = np.sort(old[idx])[::-1]
    return old


@settings(max_examples=200, deadline=None)
@given(
    vals=st.lists(st.floats(-50, 50), min_size=8, max_size=8),
    props=st.lists(st.floats(-200, 200), min_size=8, max_size=8),
    caps=st.lists(st.floats(0.01, 10), min_size=8, max_size=8),
    with_cap=st.booleans(),
)
def test_safeguards_always_hold(vals, props, caps, with_cap):
    groups = [np.array([0, 1, 2, 3]), np.array([6, 5])]
    nonneg = np.array([0, 1, 2, 3, 4])
    old = _feasible_old(vals, groups, nonneg)
    cap = np.array(caps) if with_cap else None
    new = apply_safeguards(old, np.array(props), cap, nonneg, groups)
    if cap is not None:
        assert np.all(np.abs(new - old) <= cap + 1e-9)
    assert np.all(new[nonneg] >= 0)
    for idx in groups:
        assert np.all(np.diff(new[idx]) <= 1e-12)
    # a proposal that already satisfies everything is left alone
    same = apply_safeguards(old, old, cap, nonneg, groups)
    np.testing.assert_array_equal(same, old)


def test_safeguards_examples():
    old = np.array([100.0, 70.0, 50.0])
    out = apply_safeguards(old, np.array([90.0, 95.0, -5.0]), np.array([3.0, 3.0, 3.0]), np.array([0, 1, 2]), [np.array([0, 1, 2])])
    # cap: [97, 73, 47]; order: 73 ≤ 97, 47 ≤ 73
    np.testing.assert_allclose(out, [97.0, 73.0, 47.0])
    out = apply_safeguards(np.array([5.0, 5.0]), np.array([4.0, 9.0]), None, np.array([], dtype=int), [np.array([0, 1])])
    np.testing.assert_allclose(out, [4.0, 4.0])
    out = apply_safeguards(np.array([0.5]), np.array([-2.0]), None, np.array([0]), [])
    np.testing.assert_allclose(out, [0.0])
