"""feature_stats under distributed DP: the contribution bound chosen from the data, consistent post-processing
(non-negative counts and bins that add up, floored and flagged variances) and intervals that cover the truth —
run in process with the server's calibration and per-device noise shares (`queries.local_run.run_query`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queries.feature_stats import (
    FeatureStatsKind,
    bound_grid,
    choose_bound,
    integer_parts,
    project_to_total,
)
from queries.kind import RoundPreview
from queries.local_run import run_query
from queries.uncertainty import describe
from secagg.randomness import SeededRandom

KIND = FeatureStatsKind()
SKELLAM = {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6}
FEATURES = [{"name": "age", "lower": 18.0, "upper": 90.0}, {"name": "score", "lower": 0.0, "upper": 10.0}]


def _devices(seed: int, n: int, rows: tuple[int, int] = (1, 3)) -> list[list[dict[str, float]]]:
    rng = np.random.default_rng(seed)
    return [[{"age": float(np.clip(rng.normal(40, 12), 18, 90)), "score": float(rng.uniform(2, 6))}
             for _ in range(int(rng.integers(rows[0], rows[1] + 1)))] for _ in range(n)]


def _truth(devices: list[list[dict[str, float]]], name: str) -> dict[str, float]:
    x = np.array([r[name] for d in devices for r in d])
    return {"count": float(len(x)), "mean": float(x.mean()), "var": float(x.var())}


def test_grid_and_exact_bound_without_noise() -> None:
    assert bound_grid(100) == [1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 100]
    assert bound_grid(1) == [1]
    devices = _devices(1, 40) + [[{"age": 30.0, "score": 1.0}] * 50]  # one device holds 50 rows
    run = run_query(KIND, {"features": FEATURES}, devices)
    assert run.contributors == [41, 41, 41]  # row counts, first moments, second moments
    bound = run.result["contribution_bound"]
    assert bound["max_examples_per_device"] == 64 and bound["chosen_from_data"]  # the bucket (45, 64] holds 50
    assert bound["rows_clipped"] == 0 and bound["devices_over_bound"] == 0
    assert run.result["features"]["age"]["count"] == sum(len(d) for d in devices)


def test_a_limit_below_the_data_clips_and_says_so() -> None:
    devices = _devices(2, 30, rows=(5, 5))
    run = run_query(KIND, {"features": FEATURES, "max_examples_limit": 3}, devices)
    bound = run.result["contribution_bound"]
    assert bound["max_examples_per_device"] == 3 and bound["devices_over_bound"] == 30
    assert run.result["features"]["age"]["count"] == 90  # 3 of each device's 5 rows
    assert bound["rows_clipped"] > 0


def test_analyst_bound_skips_the_first_round() -> None:
    run = run_query(KIND, {"features": FEATURES, "max_examples_per_device": 3}, _devices(3, 20))
    assert len(run.contributors) == 2
    assert run.result["contribution_bound"] == {"max_examples_per_device": 3, "chosen_from_data": False}


def test_choose_bound_trades_clipping_against_noise() -> None:
    grid = bound_grid(100)
    counts = np.zeros(len(grid) + 1)
    counts[[0, 1, 2]] = 300  # 1–3 rows
    counts[7] = 60  # a few devices with 12–16 rows
    quiet = choose_bound(grid, counts, threshold=10, bucket_std=1.0, row_std=1.0)
    assert quiet.bound == 16 and quiet.rows_clipped == 0  # little noise: clip nothing
    loud = choose_bound(grid, counts, threshold=10, bucket_std=1.0, row_std=150.0)
    assert loud.bound == 3 and loud.devices_over == 60 and loud.rows_clipped == pytest.approx(60 * (14 - 3))
    nothing = choose_bound(grid, np.full(len(grid) + 1, 2.0), threshold=10, bucket_std=1.0, row_std=1.0)
    assert nothing.bound == 100 and not nothing.evidence  # no evidence: the limit, nothing hidden is clipped


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats(-1e4, 1e4), min_size=1, max_size=20), total=st.integers(-5, 10_000))
def test_projection_is_non_negative_and_sums_to_the_total(values: list[float], total: int) -> None:
    out = project_to_total(np.array(values), float(total))
    assert np.all(out >= 0)
    assert out.sum() == pytest.approx(max(total, 0), abs=1e-6 * max(1, total))
    ints = integer_parts(out)
    assert ints.dtype == np.int64 and np.all(ints >= 0) and int(ints.sum()) == max(total, 0)


def test_noisy_release_is_consistent_and_carries_intervals() -> None:
    devices = _devices(4, 400)
    params = {"features": FEATURES, "bins": 5}
    for seed in range(3):
        run = run_query(KIND, params, devices, privacy=SKELLAM, rng=np.random.default_rng(seed),
                        noise_source=SeededRandom(b"fs-%d" % seed))
        uncertainty, warnings = describe(run.release)
        for name, got in run.result["features"].items():
            assert got["count"] >= 0 and all(c >= 0 for c in got["histogram"]["counts"])
            assert sum(got["histogram"]["counts"]) == got["count"]
            assert got["var"] > 0 and got["std"] == pytest.approx(math.sqrt(got["var"]))
            assert got["lower"] <= got["mean"] <= got["upper"]
            for key in ("count", "mean", "var", "std"):
                ci = uncertainty[f"/features/{name}/{key}"]["ci95"]
                assert ci[0] <= got[key] <= ci[1]
            if got.get("var_floored"):
                assert any(w.get("path") == f"/features/{name}/var" for w in warnings)
        assert run.result["contribution_bound"]["max_examples_per_device"] == 3
        block = run.calibration
        assert block is not None and block.rounds == 3
        assert [round(n.noise.weight, 6) for n in run.noises] == [0.3, 1.62, 1.08]  # 10 % of the budget picks the bound


def test_intervals_cover_the_truth() -> None:
    """12 seeded runs × 2 features, per value type (count, mean, var): a std half its size would cover ~67 %."""
    hits: dict[str, list[bool]] = {"count": [], "mean": [], "var": []}
    for seed in range(12):
        devices = _devices(100 + seed, 400)
        run = run_query(KIND, {"features": FEATURES}, devices, privacy=SKELLAM, rng=np.random.default_rng(seed),
                        noise_source=SeededRandom(b"cover-%d" % seed))
        uncertainty, _ = describe(run.release)
        for f in FEATURES:
            truth = _truth(devices, f["name"])
            for key in ("count", "mean", "var"):
                lo, hi = uncertainty[f"/features/{f['name']}/{key}"]["ci95"]
                hits[key].append(lo <= truth[key] <= hi)
    coverage = {k: float(np.mean(v)) for k, v in hits.items()}
    assert min(coverage.values()) >= 0.8 and np.mean(list(coverage.values())) >= 0.88, coverage


def test_variance_swamped_by_noise_is_floored_and_flagged() -> None:
    devices = [[{"v": 5.0 + 0.001 * i}] for i in range(200)]  # almost no spread inside wide bounds
    run = run_query(KIND, {"features": [{"name": "v", "lower": 0.0, "upper": 1000.0}], "max_examples_per_device": 1},
                    devices, privacy=SKELLAM, rng=np.random.default_rng(0), noise_source=SeededRandom(b"floor"))
    got = run.result["features"]["v"]
    assert got["var_floored"] is True and got["var"] > 0 and run.result["scaler"]["scale_"][0] == got["std"]
    _, warnings = describe(run.release)
    assert any(w.get("path") == "/features/v/var" and "var_floored" in w["message"] for w in warnings)


def test_preview_lists_every_value_with_its_assumption() -> None:
    from queries import dp

    params = KIND.parse_params(KIND.bind_privacy({"features": FEATURES, "bins": 2}, __import__("queries.spec").spec.PrivacySpec(**SKELLAM)))
    cal = dp.calibrate_query("skellam", 1.0, 1e-6, rounds=3, t_min=500)
    state, rounds = KIND.initial_state(params), []
    for i in range(3):
        plan = KIND.plan_round(params, state, i)
        planned = dp.plan_noise(cal, plan)
        rounds.append(RoundPreview(plan, planned.std_released(500), 500))
        state = KIND.decode_round(params, state, plan, np.zeros(plan.dim, dtype=np.int64), 500, planned.aggregate_noise(500))
    values, warnings = KIND.preview(params, rounds)
    paths = {v.path: v for v in values}
    assert {"/features/age/count", "/features/age/mean", "/features/age/var", "/features/score/histogram/counts/1"} <= set(paths)
    assert "rows" in (paths["/features/age/mean"].note or "")
    assert any("chosen from the data" in w.message for w in warnings)
    # no evidence in an all-zero histogram: planned at the limit, so every std is an upper bound
    assert rounds[1].plan.task["max_examples"] == 100


def test_rounds_with_different_contributors_describe_the_first_rounds_population() -> None:
    """Dropouts: the second round sums over other (here half as many) devices; its sums are rescaled to the first
    round's contributors, so the variance and the bins stay on the count's scale."""
    devices = [[{"age": 20.0 + (i % 2) * 50.0}] * 2 for i in range(100)]  # mean 45, variance 625
    params = KIND.parse_params({"features": [{"name": "age", "lower": 0.0, "upper": 100.0}], "max_examples_per_device": 2,
                                "bins": 2})
    state, rng = KIND.initial_state(params), np.random.default_rng(0)
    for r, who in enumerate([devices, devices[:50]]):
        plan = KIND.plan_round(params, state, r)
        state = KIND.decode_round(params, state, plan, sum(KIND.contribute(plan.typed_task(KIND), d, rng) for d in who), len(who))
    got = KIND.finalize(params, state).result["features"]["age"]
    assert got["count"] == 200 and got["mean"] == pytest.approx(45.0)
    assert got["var"] == pytest.approx(625.0, rel=1e-6) and got["histogram"]["counts"] == [100, 100]


def test_means_share_moves_the_budget_between_the_moment_rounds() -> None:
    """`means_share` is the first moments' share of the moment rounds' budget: the round weights follow it (they
    still sum to the rounds), the means' noise falls and the variances' rises; out-of-range shares are refused."""
    fixed = {"features": FEATURES, "max_examples_per_device": 3}
    default, means = KIND.parse_params(fixed), KIND.parse_params({**fixed, "means_share": 0.85})
    assert default.weights() == pytest.approx([1.2, 0.8]) and means.weights() == pytest.approx([1.7, 0.3])
    chosen = KIND.parse_params({"features": FEATURES, "means_share": 0.85})
    assert sum(chosen.weights()) == pytest.approx(3) and chosen.weights()[1] == pytest.approx(3 * 0.9 * 0.85)
    for bad in (0.0, 0.05, 0.99, "0.8"):
        with pytest.raises(Exception, match="means_share"):
            KIND.parse_params({**fixed, "means_share": bad})
    devices = _devices(9, 300)
    runs = {share: run_query(KIND, {**fixed, "means_share": share}, devices, privacy=SKELLAM, t_min=300,
                             rng=np.random.default_rng(0), noise_source=SeededRandom(b"share")) for share in (0.6, 0.85)}
    std = {share: (r.release.noise_std["/features/age/mean"], r.release.noise_std["/features/age/var"])
           for share, r in runs.items()}
    assert std[0.85][0] < std[0.6][0] * 0.9 and std[0.85][1] > std[0.6][1] * 1.4


def test_clip_at_clips_each_feature_at_its_federated_quantile_before_the_moments() -> None:
    """`clip_at` 0.99 on heavy-tailed values (0.5 % of them 50–100× the rest): one more round finds each feature's
    0.99-quantile from a noisy hierarchical histogram, the moment rounds use [lower, the upper edge of its leaf], and
    the mean and variance are those of the values clipped there — not pulled by the outliers. The clip round spends
    `clip_budget_share` of the budget (its privacy weight), and the preview says so up front."""
    from queries.spec import PrivacySpec

    rng = np.random.default_rng(21)
    devices = []
    for _ in range(3000):
        x = float(rng.lognormal(3, 0.4)) if rng.random() > 0.005 else float(rng.uniform(1000, 2000))
        devices.append([{"ms": x}])
    raw = {"features": [{"name": "ms", "lower": 0, "upper": 2000}], "max_examples_per_device": 1, "clip_at": 0.99}
    privacy = {"mechanism": "skellam", "epsilon": 4.0, "delta": 1e-6}
    run = run_query(KIND, raw, devices, privacy=privacy, rng=np.random.default_rng(0), noise_source=SeededRandom(b"clip"))
    f = run.result["features"]["ms"]
    values = np.array([d[0]["ms"] for d in devices])
    q99 = float(np.quantile(values, 0.99))
    assert f["clip"]["declared_upper"] == 2000 and f["clip"]["at"] == 0.99
    assert abs(f["clip"]["quantile"] - q99) < 0.15 * q99, (f["clip"], q99)
    upper = f["clip"]["upper"]
    assert f["upper"] == upper and upper >= f["clip"]["quantile"] and upper < 200  # the outliers are cut off
    clipped = np.minimum(values, upper)
    assert abs(f["mean"] - clipped.mean()) < 3 * run.release.noise_std["/features/ms/mean"] + 0.01
    assert abs(f["mean"] - values.mean()) > 5  # the unclipped mean (≈ 35) is pulled ≈ 15 by the outliers
    params = KIND.parse_params(KIND.bind_privacy(raw, PrivacySpec.model_validate(privacy)))
    assert params.weights() == pytest.approx([3 * 0.2, 3 * 0.8 * 0.6, 3 * 0.8 * 0.4]) and KIND.rounds_upper_bound(params) == 3
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    assert plan.task["stage"] == "clip_quantiles" and plan.privacy_weight == pytest.approx(0.6)
    _, warnings = KIND.preview(params, [RoundPreview(plan, std=3.0, contributors=3000)])
    assert any("clip_at" in w.message and "20%" in w.message for w in warnings)
