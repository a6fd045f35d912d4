"""The `training` kind through the QueryKind interface: specs, bounds, schedule, state, finalize."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from queries.local_run import run_locally
from queries.registry import get_kind
from fleet_sim import urlbar_sim
from queries.training.frecency import HANDCRAFTED, PARAM_NAMES, example_params
from secagg.encoding import bits_for

KIND = get_kind("training")


def _rows(rng, n, d=3, classes=2):
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int) if classes == 2 else rng.integers(0, classes, n)
    return [{"x": X[i].tolist(), "y": int(y[i])} for i in range(n)]


def _params(**over):
    base = {"model": {"name": "logistic", "n_features": 3}, "rounds": 4, "eval_every": 2, "holdout_fraction": 0.0}
    return base | over


def _plan_for(params_raw, phase):
    params = KIND.parse_params(params_raw)
    state = dataclasses.replace(KIND.initial_state(params), phase=phase, class_weights=None)
    return params, KIND.plan_round(params, state, 0)


@pytest.mark.parametrize(
    "raw, field",
    [
        (_params(model={"name": "nope"}), "model.name"),
        (_params(model={"name": "logistic", "n_features": 0}), "model.n_features"),
        (_params(model={"name": "logistic", "n_features": 3, "initial_weights": [1, 2]}), "model.initial_weights"),
        (_params(rounds=0), "rounds"),
        (_params(server_optimizer={"name": "sgd"}), "server_optimizer"),
        (_params(server_optimizer={"name": "rprop", "increase": 0.9}), "increase"),
        (_params(server_optimizer={"name": "rprop", "initial_step": [1.0]}), "server_optimizer.initial_step"),
        (_params(safeguards={"ordered_groups": [[0, 9]]}), "safeguards.ordered_groups[0]"),
        (_params(safeguards={"nonnegative": ["w0", "zz"]}), "safeguards.nonnegative"),
        (_params(safeguards={"nonnegative": True}, model={"name": "logistic", "n_features": 3, "initial_weights": [-1, 0, 0, 0]}), "nonnegative"),
        (_params(scaling={"a": {"mean": 0, "std": 1}}), "scaling"),
        (_params(features=["a", "b"]), "features"),
        (_params(class_weighting=True, model={"name": "linear", "n_features": 3}), "class_weighting"),
        (_params(bogus=1), "bogus"),
    ],
)
def test_bad_specs_name_the_field(raw, field):
    with pytest.raises(ValidationError) as info:
        KIND.parse_params(raw)
    assert field in str(info.value)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 40),
    lr=st.floats(0.01, 1e4),
    clip=st.floats(0.01, 100),
    pb=st.integers(4, 30),
    weighting=st.sampled_from(["examples", "uniform"]),
    votes=st.sampled_from([None, "sign", "clipped"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_device_vectors_respect_plan_bounds(n, lr, clip, pb, weighting, votes, seed):
    rng = np.random.default_rng(seed)
    opt = {"name": "fedavg"} if votes is None else {"name": "rprop", "votes": votes}
    raw = _params(
        model={"name": "mlp", "n_features": 3, "hidden": 4, "n_classes": 3},
        client={"lr": lr, "max_examples": 25, "epochs": 2, "batch_size": 4},
        clip_norm=clip,
        precision_bits=pb,
        weighting=weighting,
        server_optimizer=opt,
        holdout_fraction=0.3,
        class_weighting=True,
    )
    rows = _rows(rng, n, classes=3)
    for phase in ("label_counts", "train", "eval"):
        params, plan = _plan_for(raw, phase)
        vec = KIND.contribute(plan.typed_task(KIND), rows, rng)
        assert vec.dtype == np.int64 and vec.shape == (plan.dim,)
        assert np.abs(vec).max(initial=0) <= plan.max_abs
        assert np.abs(vec).sum() <= plan.l1_sensitivity + 1e-9
        assert np.linalg.norm(vec.astype(float)) <= plan.l2_sensitivity + 1e-9
        if phase == "train" and votes == "sign":
            assert plan.max_abs == 1 and plan.l1_sensitivity == plan.dim
            assert plan.l2_sensitivity == pytest.approx(math.sqrt(plan.dim))


def test_update_mode_bounds_are_dominated_by_the_update():
    params, plan = _plan_for(_params(clip_norm=2.0, precision_bits=20), "train")
    u = 1 << 20
    assert plan.dim == 5 and plan.max_abs == u
    assert plan.l2_sensitivity < 1.04 * u  # the weight entry adds ≤ 3 %
    _, plan_u = _plan_for(_params(weighting="uniform"), "train")
    assert plan_u.dim == 4  # no weight entry: the server divides by the exact contributor count


def test_schedule_and_rounds_upper_bound():
    rng = np.random.default_rng(1)
    devices = [_rows(rng, 10) for _ in range(6)]
    raw = _params(rounds=5, eval_every=2, class_weighting=True)
    params = KIND.parse_params(raw)
    result, contributors = run_locally(KIND, raw, devices)
    # label counts + evals at t = 0, 2, 4, 5 + 5 training rounds
    assert KIND.rounds_upper_bound(params) == 1 + 5 + 4 == len(contributors)
    assert [h["round"] for h in result["history"]] == [0, 2, 4, 5]
    assert result["rounds"] == 5 and result["stop_reason"] == "completed"
    assert result["class_weights"] is not None and len(result["class_weights"]) == 2
    raw0 = _params(rounds=3, eval_every=0)
    assert KIND.rounds_upper_bound(KIND.parse_params(raw0)) == 3
    assert len(run_locally(KIND, raw0, devices)[1]) == 3


def test_class_weights_from_label_counts():
    rows = [{"x": [0.0, 0.0, 0.0], "y": 0}] * 30 + [{"x": [1.0, 0.0, 0.0], "y": 1}] * 10
    params = KIND.parse_params(_params(class_weighting=True))
    state = KIND.initial_state(params)
    plan = KIND.plan_round(params, state, 0)
    rng = np.random.default_rng(0)
    agg = sum(KIND.contribute(plan.typed_task(KIND), rows[i::4], rng) for i in range(4))
    state = KIND.decode_round(params, state, plan, agg, 4)
    np.testing.assert_allclose(state.label_shares, [0.75, 0.25], atol=1e-4)  # stochastic rounding at 2^-precision_bits
    w = np.array(state.class_weights)
    assert w[1] / w[0] == pytest.approx(3.0, rel=1e-3)


def test_state_is_json_and_resume_gives_the_same_schedule():
    """A server restart reloads state from JSON between any two rounds and carries on."""
    rng = np.random.default_rng(2)
    devices = [_rows(rng, 12) for _ in range(5)]
    raw = _params(rounds=4, server_optimizer={"name": "adam", "lr": 0.1})
    params = KIND.parse_params(raw)
    state = KIND.initial_state(params)
    r = 0
    while (plan := KIND.plan_round(params, state, r)) is not None:
        json.dumps(plan.task)
        agg = sum(KIND.contribute(plan.typed_task(KIND), d, rng) for d in devices)
        state = KIND.state_from_json(json.loads(json.dumps(KIND.state_to_json(KIND.decode_round(params, state, plan, agg, len(devices))))))
        # re-planning the same round from stored state gives the same plan (idempotent)
        r += 1
    assert state.phase == "done" and state.t == 4 and state.opt["t"] == 4
    result = KIND.finalize(params, state).result
    json.dumps(result)
    assert result["history"][-1]["eval_loss"] < result["history"][0]["eval_loss"]


def test_stale_or_empty_round_changes_nothing():
    params = KIND.parse_params(_params())
    state = KIND.initial_state(params)
    plan = KIND.plan_round(params, state, 0)
    assert KIND.decode_round(params, state, plan, np.zeros(plan.dim, dtype=np.int64), 0) == state
    other = dataclasses.replace(state, phase="train")
    assert KIND.decode_round(params, other, plan, np.zeros(plan.dim, dtype=np.int64), 3) == other


def test_finalize_from_any_state_and_server_stop():
    params = KIND.parse_params(_params())
    state = KIND.initial_state(params)
    result = KIND.finalize(params, state).result
    assert result["weights"] == [0.0] * 4 and result["stop_reason"] == "interrupted"
    assert result["stopped"] is None
    result = KIND.finalize(params, state, stop_reason="privacy budget exhausted").result
    assert result["stopped"] == "privacy budget exhausted" == result["stop_reason"]


def test_early_stopping_keeps_best_weights():
    """Labels are noise, a huge server lr makes every update worse: stop after `patience` evals."""
    rng = np.random.default_rng(3)
    devices = [[{"x": rng.normal(size=3).tolist(), "y": int(rng.integers(0, 2))} for _ in range(10)] for _ in range(8)]
    raw = _params(rounds=50, eval_every=1, patience=2, server_optimizer={"name": "fedavg", "lr": 200.0}, clip_norm=5.0)
    result, contributors = run_locally(KIND, raw, devices)
    assert result["stop_reason"] == "early_stopping"
    assert result["rounds"] < 50 and len(contributors) < KIND.rounds_upper_bound(KIND.parse_params(raw))
    losses = [h["eval_loss"] for h in result["history"]]
    best = int(np.argmin(losses))
    assert result["best_round"] == result["history"][best]["round"]
    assert len(losses) - 1 - best == 2  # two evaluations without improvement


def test_decode_is_robust_to_noise():
    """Distributed noise (added by the platform) may make sums negative; decode never fails or divides by ~0."""
    rng = np.random.default_rng(4)
    params = KIND.parse_params(_params())
    state = KIND.initial_state(params)
    for r in range(12):
        plan = KIND.plan_round(params, state, r)
        if plan is None:
            break
        agg = rng.normal(0, plan.max_abs * 3, size=plan.dim).astype(np.int64)
        state = KIND.decode_round(params, state, plan, agg, 3)
        assert np.all(np.isfinite(state.weights))
    assert state.phase == "done"


def test_sign_votes_sum_exactly_and_use_few_bits():
    rng = np.random.default_rng(5)
    devices = urlbar_sim.make_population(rng, 20, n_interactions=4)
    params = KIND.parse_params(example_params(rounds=1, eval_every=0))
    state = KIND.initial_state(params)
    plan = KIND.plan_round(params, state, 0)
    votes = [KIND.contribute(plan.typed_task(KIND), d, rng) for d in devices]
    assert all(set(np.unique(v)) <= {-1, 0, 1} for v in votes)
    total = np.sum(votes, axis=0)
    assert plan.dim == len(PARAM_NAMES) and plan.max_abs == 1
    assert bits_for(300, plan.max_abs) == 10  # |vote sum| ≤ 300 needs 10 signed bits
    state = KIND.decode_round(params, state, plan, total, len(devices))
    moved = np.array(state.weights) - np.array(HANDCRAFTED)
    step0 = np.array([params.server_optimizer.initial_step[n] for n in PARAM_NAMES])
    # Rprop uses only the sign of the vote sum: each weight moves by its initial step that way (or less,
    # when a safeguard trims it; type_other sits at 0 and cannot go below)
    assert np.all(np.abs(moved) <= step0 + 1e-12)
    assert np.all((moved == 0) | (np.sign(moved) == np.sign(total)))
    assert np.all(moved[total == 0] == 0)
    assert np.count_nonzero(np.isclose(np.abs(moved), step0)) >= 5


def test_frecency_safeguards_every_round():
    rng = np.random.default_rng(6)
    devices = urlbar_sim.make_population(rng, 30, n_interactions=4)
    raw = example_params(rounds=6, eval_every=0)
    params = KIND.parse_params(raw)
    state = KIND.initial_state(params)
    r = 0
    while (plan := KIND.plan_round(params, state, r)) is not None:
        old = np.array(state.weights)
        state = KIND.decode_round(params, state, plan, sum(KIND.contribute(plan.typed_task(KIND), d, rng) for d in devices), 30)
        new = np.array(state.weights)
        caps = np.array([3.0] * 5 + [0.1] * 4)
        assert np.all(np.abs(new - old) <= caps + 1e-9)
        assert np.all(new >= 0)
        assert np.all(np.diff(new[:5]) <= 0)
        r += 1


# ---------------------------------------------------------------- the typed task (TrainingTask)
def _train_task(**params: object) -> dict:
    from queries.registry import get_kind

    kind = get_kind("training")
    p = kind.parse_params({"model": {"name": "logistic", "n_features": 2}, "rounds": 2, "eval_every": 0, **params})
    plan = kind.plan_round(p, kind.initial_state(p), 0)
    assert plan is not None
    task: dict = plan.task
    return task


def test_every_phase_plans_a_task_its_parser_accepts_and_round_trips() -> None:
    from queries.registry import get_kind

    kind = get_kind("training")
    tasks = [_train_task(), _train_task(eval_every=1), _train_task(adaptive_clipping={}),
             _train_task(model={"name": "softmax", "n_features": 2, "n_classes": 3}, class_weighting=True)]
    assert [t["phase"] for t in tasks] == ["train", "eval", "train", "label_counts"]
    for task in tasks:
        assert kind.task_json(kind.parse_task(task)) == task


@pytest.mark.parametrize("spoil, field", [
    ({"phase": "finetune"}, "phase"),
    ({"precision_bits": "20"}, "precision_bits"),
    ({"precision_bits": 20.0}, "precision_bits"),
    ({"clip_entries": True}, "clip_entries"),
    ({"clip_entries": 5}, "clip_entries"),
    ({"weights": [0.0] * 100_001}, "weights"),
    ({"votes": "maybe"}, "votes"),
    ({"client": {"epochs": "1", "batch_size": 0, "lr": 0.1, "max_examples": 10}}, "client"),
    ({"unexpected": 1}, "unexpected"),
])
def test_a_spoiled_train_task_is_refused_naming_the_field(spoil: dict, field: str) -> None:
    from queries.kind import QueryKindError
    from queries.registry import get_kind

    kind = get_kind("training")
    bad = _train_task(adaptive_clipping={}) | spoil
    with pytest.raises(QueryKindError, match=f"^task.{field}[.:]"):  # the one parse every method's caller makes
        kind.parse_task(bad)


def test_a_missing_key_is_refused() -> None:
    from queries.kind import QueryKindError
    from queries.registry import get_kind

    task = _train_task()
    del task["clip_norm"]
    with pytest.raises(QueryKindError, match="^task.clip_norm:"):
        get_kind("training").parse_task(task)
