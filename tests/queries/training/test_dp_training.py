"""Training under distributed DP: the defaults bound at submit (uniform weighting, adaptive clipping), the
clip norm following a private quantile, noisy evaluations clamped with intervals, noise-aware model selection,
divergence as a failure, and the README's DP example (examples/) run in process with the server's noise."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from queries.kind import AggregateNoise
from queries.local_run import run_query
from queries.registry import get_kind
from queries.spec import PrivacySpec
from queries.training import TrainedModel, encoding
from queries.training.kind import _next_clip
from secagg.randomness import SeededRandom

KIND = get_kind("training")
ROOT = Path(__file__).resolve().parents[3]
DG = PrivacySpec(mechanism="discrete_gaussian", epsilon=8.0, delta=1e-5)


def _params(**over):
    return {"model": {"name": "logistic", "n_features": 3}, "rounds": 4, "eval_every": 2, "holdout_fraction": 0.0} | over


def _devices(seed: int, n: int = 30, rows: int = 8):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        X = rng.normal(size=(rows, 3))
        y = (X[:, 0] + 0.3 * rng.normal(size=rows) > 0).astype(int)
        out.append([{"x": X[i].tolist(), "y": int(y[i])} for i in range(rows)])
    return out


def test_dp_defaults_are_bound_at_submit_and_never_override_the_analyst() -> None:
    bound = KIND.bind_privacy(_params(), DG)
    assert bound["weighting"] == "uniform" and bound["adaptive_clipping"] == {}
    assert KIND.bind_privacy(_params(), PrivacySpec()) == _params()  # no noise: untouched
    fixed = KIND.bind_privacy(_params(clip_norm=2.0, weighting="examples"), DG)
    assert fixed["weighting"] == "examples" and "adaptive_clipping" not in fixed
    votes = KIND.bind_privacy(_params(server_optimizer={"name": "rprop"}), DG)
    assert "adaptive_clipping" not in votes  # sign votes are never clipped
    with pytest.raises(ValueError, match="adaptive_clipping"):
        KIND.parse_params(_params(server_optimizer={"name": "rprop"}, adaptive_clipping={}))


def test_clip_norm_moves_towards_the_target_quantile() -> None:
    # the geometric update (one bit): all 50 unclipped with target ½ → shrink by e^{−0.2·½}
    assert _next_clip(2.0, np.array([50.0]), 50, 0.5, 0.2) == pytest.approx(2.0 * math.exp(-0.1))
    assert _next_clip(2.0, np.array([0.0]), 50, 0.5, 0.2) == pytest.approx(2.0 * math.exp(0.1))
    # the warm start: the median of the norms' histogram, interpolated on the log2 grid
    norms = np.array([0.3] * 20 + [3.0] * 20 + [30.0] * 11)
    counts = np.bincount([encoding.norm_bucket(x, 1.0) for x in norms], minlength=encoding.NORM_BUCKETS).astype(float)
    median = _next_clip(1.0, counts, len(norms), 0.5, 0.2)
    assert 2.0 < median <= 4.0  # the 3.0 bucket (2, 4]
    assert _next_clip(1.0, np.zeros(encoding.NORM_BUCKETS), 10, 0.5, 0.2) == 1.0  # no information: unchanged


def test_adaptive_clipping_run_records_its_clip_norms_and_vectors_stay_in_bounds() -> None:
    devices = _devices(1)
    raw = KIND.bind_privacy(_params(rounds=6, eval_every=0, clip_norm=0.01, adaptive_clipping={}), DG)
    params = KIND.parse_params(raw)
    state = KIND.initial_state(params)
    rng = np.random.default_rng(0)
    for r in range(6):
        plan = KIND.plan_round(params, state, r)
        vecs = [KIND.contribute(plan.typed_task(KIND), d, rng) for d in devices]
        for v in vecs:
            assert np.abs(v).max() <= plan.max_abs and np.linalg.norm(v.astype(float)) <= plan.l2_sensitivity
        clip = encoding.update_layout(4, False, plan.task["clip_entries"]).view(sum(vecs))["clip"]
        assert len(clip) == (encoding.NORM_BUCKETS if r == 0 else 1)
        state = KIND.decode_round(params, state, plan, sum(vecs), len(devices))
    res = KIND.finalize(params, state).result
    assert len(res["clip_norms"]) == 6 and res["clip_norms"][0] == 0.01
    from queries.training.client import local_update, objective
    from queries.training.models import build_model

    model = build_model(params.model.model_dump())
    norms = [np.linalg.norm(local_update(objective(model, d), np.zeros(4), 1, 0, 0.1, rng)) for d in devices]
    # the warm start left the hand-set 0.01 behind at once, for the median norm (within its factor-2 buckets)
    assert np.median(norms) / 2 < res["clip_norms"][1] < np.median(norms) * 2


def test_noisy_evaluations_are_clamped_and_carry_intervals() -> None:
    params = KIND.parse_params(KIND.bind_privacy(_params(), DG))
    state = KIND.initial_state(params)
    plan = KIND.plan_round(params, state, 0)
    u = float(encoding.unit(params.precision_bits))
    vals = encoding.eval_layout(0).pack(train_loss=0.0, eval_loss=-0.5, accuracy=31.0, metrics=np.zeros(0),
                                        train_weight=30.0, eval_weight=30.0)
    state = KIND.decode_round(params, state, plan, (vals * u).astype(np.int64), 30, AggregateNoise(std=2.0 * u))
    entry = state.history[0]
    assert entry["eval_loss"] == 0.0 and entry["accuracy"] == 1.0  # clamped into [0, cap] and [0, 1]
    release = KIND.finalize(params, state)
    assert release.noise_std["/history/0/accuracy"] == pytest.approx(2.0 / 30 * math.sqrt(1 + (31 / 30) ** 2))
    lo, hi = release.intervals["/history/0/accuracy"]
    assert 0.0 <= lo < hi == 1.0


def test_selection_prefers_the_newest_evaluation_within_the_noise() -> None:
    params = KIND.parse_params(KIND.bind_privacy(_params(rounds=4, eval_every=1), DG))
    state = dataclasses.replace(KIND.initial_state(params), phase="eval")
    u = float(encoding.unit(params.precision_bits))
    noise = AggregateNoise(std=1.0 * u)  # loss std ≈ 10/30·1 → tolerance ≈ 0.9
    for t, loss in enumerate([0.50, 0.45, 0.60]):
        state = dataclasses.replace(state, t=t, phase="eval", weights=[float(t)] * 4)
        plan = KIND.plan_round(params, state, t)
        vals = encoding.eval_layout(0).pack(train_loss=loss / 10 * 30, eval_loss=loss / 10 * 30, accuracy=27.0,
                                            metrics=np.zeros(0), train_weight=30.0, eval_weight=30.0)
        state = KIND.decode_round(params, state, plan, np.round(vals * u).astype(np.int64), 30, noise)
    assert state.best is not None and state.best.round == 2  # 0.60 is within the noise of 0.45: the newest wins
    exact = KIND.parse_params(_params(rounds=4, eval_every=1))
    st2 = dataclasses.replace(KIND.initial_state(exact), phase="eval")
    for t, loss in enumerate([0.50, 0.45, 0.60]):
        st2 = dataclasses.replace(st2, t=t, phase="eval", weights=[float(t)] * 4)
        plan = KIND.plan_round(exact, st2, t)
        vals = encoding.eval_layout(0).pack(train_loss=loss / 10, eval_loss=loss / 10, accuracy=0.9,
                                            metrics=np.zeros(0), train_weight=1.0, eval_weight=1.0)
        st2 = KIND.decode_round(exact, st2, plan, np.round(vals * u).astype(np.int64), 30)
    assert st2.best is not None and st2.best.round == 1  # without noise: the lowest loss


def test_exploding_loss_ends_the_query_as_a_failure_keeping_the_last_good_weights() -> None:
    rng = np.random.default_rng(2)  # labels are noise: huge steps leave half the rows badly misclassified
    devices = [[{"x": rng.normal(size=3).tolist(), "y": int(rng.integers(0, 2))} for _ in range(8)] for _ in range(30)]
    raw = _params(rounds=4, eval_every=1, clip_norm=1e6, client={"epochs": 1, "batch_size": 0, "lr": 1000.0},
                  server_optimizer={"name": "fedavg", "lr": 10.0})
    run = run_query(KIND, raw, devices, rng=np.random.default_rng(0))
    res = run.result
    assert res["stop_reason"] == "diverged" and res["divergence"]["round"] >= 1
    assert "exploded" in res["divergence"]["reason"]
    assert run.release.failure is not None and "diverged" in run.release.failure
    assert res["best_round"] is not None and res["best_round"] < res["divergence"]["round"]
    assert res["weights"] == [0.0] * 4  # the evaluation before the first update was the last good one
    json.dumps(res, allow_nan=False)


def test_weights_that_stop_being_finite_end_the_query(monkeypatch: pytest.MonkeyPatch) -> None:
    from queries.training import kind as training_kind

    monkeypatch.setattr(training_kind, "fedavg_step", lambda theta, delta, spec: theta + np.inf)
    run = run_query(KIND, _params(rounds=3, eval_every=1), _devices(3), rng=np.random.default_rng(0))
    assert run.result["stop_reason"] == "diverged" and "finite" in run.result["divergence"]["reason"]
    assert all(math.isfinite(w) for w in run.result["weights"]) and run.release.failure is not None


def test_impossible_accuracy_is_divergence() -> None:
    params = KIND.parse_params(_params())
    state = KIND.initial_state(params)
    plan = KIND.plan_round(params, state, 0)
    u = float(encoding.unit(params.precision_bits))
    vals = encoding.eval_layout(0).pack(train_loss=0.1, eval_loss=0.1, accuracy=2.0, metrics=np.zeros(0),
                                        train_weight=1.0, eval_weight=1.0)
    state = KIND.decode_round(params, state, plan, (vals * u).astype(np.int64), 30)  # exact: no noise to blame
    assert state.stop_reason == "diverged" and "outside [0, 1]" in state.divergence["reason"]


def test_readme_dp_pipeline_reaches_auc_097_within_the_production_caps() -> None:
    """examples/ as the README runs them, both under DP within the production profile's caps (ε ≤ 2, δ ≤ 1e-6): the
    scaling statistics, then the training with that answer merged in, over one device per training row
    (devstack/readme_pipeline.py; `make bench` section dp_training runs 20 seeds)."""
    from devstack.readme_pipeline import STATS_SPEC, TRAIN_SPEC, fleet, run_pipeline

    readme = (ROOT / "README.md").read_text()
    assert "examples/breast_cancer_stats.json" in readme and "examples/breast_cancer_train_dp.json" in readme
    for spec in (STATS_SPEC, TRAIN_SPEC):
        privacy = json.loads(spec.read_text())["privacy"]
        assert privacy["mechanism"] != "none" and privacy["epsilon"] <= 2 and privacy["delta"] <= 1e-6, spec
    devices = fleet()
    for seed in range(3):
        run = run_pipeline(seed, devices=devices)
        assert run.stats["suppressed"] == [] and run.result["stop_reason"] == "completed", (seed, run.result["divergence"])
        assert run.auc >= 0.97, (seed, run.auc)


def test_without_a_holdout_the_loss_is_released_once_from_both_sums() -> None:
    """holdout_fraction 0: every row is a training and an evaluation row, so the two noisy sums estimate one loss. It
    is released once (eval_loss, no duplicate `loss` series) from both sums, with about 1/√2 the noise of one."""
    devices = _devices(4, n=60)
    runs = {}
    for holdout in (0.0, 0.5):
        runs[holdout] = run_query(KIND, _params(holdout_fraction=holdout), devices, privacy=DG, t_min=60,
                                  rng=np.random.default_rng(1), noise_source=SeededRandom(b"holdout"))
    without, held = runs[0.0], runs[0.5]
    assert all("loss" not in e and "eval_loss" in e for e in without.result["history"])
    assert all("loss" in e for e in held.result["history"])
    one = without.release.noise_std["/history/0/eval_loss"]
    two = held.release.noise_std["/history/0/eval_loss"]
    assert one < 0.8 * two, (one, two)


def _noisy_evals(params, losses, loss_std: float, rng: np.random.Generator | None = None):
    """Feed evaluations whose pooled loss (holdout 0: both sums, 30 devices) has the given values plus, with `rng`,
    their Gaussian noise; return the state after the last one (or the first that ends the query)."""
    state = dataclasses.replace(KIND.initial_state(params), phase="eval")
    u = float(encoding.unit(params.precision_bits))
    n, cap = 30, params.loss_cap
    sigma = loss_std * math.sqrt(2) * n / cap  # the entries' std, in units of one device's share
    for t, loss in enumerate(losses):
        state = dataclasses.replace(state, t=t, phase="eval", weights=[float(t)] * 4)
        plan = KIND.plan_round(params, state, t)
        vals = encoding.eval_layout(0).pack(train_loss=loss / cap * n, eval_loss=loss / cap * n, accuracy=0.9 * n,
                                            metrics=np.zeros(0), train_weight=float(n), eval_weight=float(n))
        if rng is not None:
            vals = vals + rng.normal(0, sigma, size=vals.shape)
        state = KIND.decode_round(params, state, plan, np.round(vals * u).astype(np.int64), n, AggregateNoise(std=sigma * u))
        if state.stop_reason is not None:
            break
    return state


def test_an_exploding_loss_is_caught_even_when_the_evaluation_noise_is_large() -> None:
    """Loss std 1.0 with cap 10 (above cap/16, where the former test against the lowest loss plus 4 stds, times 3,
    needed more than the cap): a jump from ln 2 to 9.5 is divergence; an honest run with the same noise is not, in
    200 noisy repetitions of a decreasing loss."""
    params = KIND.parse_params(KIND.bind_privacy(_params(rounds=4, eval_every=1), DG))
    state = _noisy_evals(params, [0.69, 9.5], 1.0)
    assert state.stop_reason == "diverged" and "exploded" in state.divergence["reason"], state.divergence
    assert state.divergence["round"] == 1 and state.best is not None and state.best.round == 0
    rng = np.random.default_rng(5)
    alarms = [s.divergence for s in (_noisy_evals(params, [0.69, 0.4, 0.2, 0.15], 1.0, rng) for _ in range(200))
              if s.stop_reason == "diverged"]
    assert alarms == []
    hits = sum(_noisy_evals(params, [0.69, 0.6, 9.0, 9.5], 1.0, rng).stop_reason == "diverged" for _ in range(100))
    assert hits >= 95


def test_a_run_whose_training_never_beat_the_start_says_so() -> None:
    """The losses after training are worse than the start beyond the noise but short of exploding: selection keeps
    the starting weights, and the release says they are the starting model's rather than a trained one."""
    params = KIND.parse_params(KIND.bind_privacy(_params(rounds=4, eval_every=1), DG))
    state = _noisy_evals(params, [0.69, 1.6, 1.7], 0.1)
    assert state.stop_reason is None and state.best is not None and state.best.round == 0
    state = dataclasses.replace(state, phase="done")
    release = KIND.finalize(params, state)
    assert any(w.path == "/best_round" and "starting model" in w.message for w in release.warnings), release.warnings
