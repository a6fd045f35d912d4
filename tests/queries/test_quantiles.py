"""The quantiles kind (queries/quantiles.py): the tree and its vector, consistency, quantiles and the CDF without
noise, clipping counted, validity, and under distributed noise the rank error and the intervals' coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from queries.local_run import run_query
from queries.quantiles import QuantilesKind, consistent, feature_dim, tree
from secagg.randomness import SeededRandom

KIND = QuantilesKind()
FEATURE = {"name": "ms", "lower": 0.0, "upper": 1000.0}


def _params(**over):
    return {"features": [FEATURE], "quantiles": [0.1, 0.5, 0.9], "max_examples_per_device": 3} | over


def test_the_default_tree_and_its_choice_by_the_rank_error_count() -> None:
    assert tree(4096) == (4, 6)  # (D + 2)(b − 1)D: b=2 168, b=4 144, b=8 168, b=16 225
    assert tree(4096, branching=16) == (16, 3) and tree(4096, levels=4) == (8, 4) and tree(100, 3, 5) == (3, 5)
    assert tree(1000) == (4, 5)  # rounded up to a power of the branching: 1,024 leaves
    assert feature_dim(4, 2) == 1 + 4 + 16 + 2


def test_without_noise_the_quantiles_are_the_data_s_within_a_leaf_and_clipping_is_counted() -> None:
    rng = np.random.default_rng(3)
    devices = [[{"ms": float(v)} for v in rng.exponential(150, size=int(rng.integers(1, 4)))] for _ in range(400)]
    devices += [[{"ms": -5.0}], [{"ms": 5000.0}, {"ms": 7000.0}], [{"ms": None}, {"other": 3}, {"ms": "12"}]]
    run = run_query(KIND, _params(), devices, rng=np.random.default_rng(0))
    f = run.result["features"]["ms"]
    values = np.clip(np.array([r["ms"] for d in devices for r in d if isinstance(r.get("ms"), float)]), 0, 1000)
    assert f["count"] == len(values) and f["clipped_below"] == 1 and f["clipped_above"] == 2
    width = 1000 / 4096
    for q, v in f["quantiles"].items():
        assert abs(v - np.quantile(values, float(q), method="inverted_cdf")) <= width + 1e-9, (q, v)
    cdf = f["cdf"]
    assert len(cdf["edges"]) == len(cdf["fraction"]) == 1025 and cdf["fraction"][0] == 0 and cdf["fraction"][-1] == 1
    assert all(a <= b for a, b in zip(cdf["fraction"], cdf["fraction"][1:]))
    assert run.release.noise_std == {} and run.release.intervals == {}


def test_consistency_makes_every_node_its_children_s_sum_and_keeps_exact_counts() -> None:
    rng = np.random.default_rng(1)
    b, depth = 4, 3
    leaves = rng.integers(0, 20, size=b ** depth).astype(float)
    exact = [leaves.reshape(-1, b ** (depth - level)).sum(axis=1) for level in range(depth + 1)]
    assert all(np.allclose(a, e) for a, e in zip(consistent(exact, b), exact))
    noisy = [e + rng.normal(0, 3, size=e.shape) for e in exact]
    fixed = consistent(noisy, b)
    for level in range(depth):
        assert np.allclose(fixed[level], fixed[level + 1].reshape(-1, b).sum(axis=1))
    # least squares over the hierarchy: the leaves are closer to the truth than the noisy leaves were
    errors = [np.mean((f[-1] - exact[-1]) ** 2) for f in (noisy, fixed)]
    assert errors[1] < errors[0]


def test_validity_ties_every_level_to_the_count() -> None:
    params = KIND.parse_params(_params(resolution=16, branching=4))
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    statement = KIND.validity(plan.typed_task(KIND))
    honest = KIND.contribute(plan.typed_task(KIND), [{"ms": 10.0}, {"ms": 990.0}, {"ms": 2000.0}], np.random.default_rng(0))
    assert statement.check(honest.tolist()) is None
    assert honest[0] == 3 and honest[-1] == 1 and honest[-2] == 0
    two_paths = honest.copy()
    two_paths[1 + 1] += 1  # a second level-1 node for the same examples
    assert statement.check(two_paths.tolist()) is not None
    heavy = honest.copy()
    heavy[[0, 1, 5]] = [4, 4, 4]  # four examples where three are allowed
    assert statement.check(heavy.tolist()) is not None
    clipped = honest.copy()
    clipped[-2] = 3  # more clipped values than values
    assert statement.check(clipped.tolist()) is not None
    l1, l2 = KIND.task_sensitivity(plan.typed_task(KIND))
    assert np.abs(honest).sum() <= l1 and np.linalg.norm(honest.astype(float)) <= l2


@pytest.mark.parametrize("over, field", [
    ({"quantiles": [0.5, 1.0]}, "quantiles"),
    ({"quantiles": [0.5, 0.5]}, "quantiles"),
    ({"quantiles": []}, "quantiles"),
    ({"features": [{"name": "ms", "lower": 5, "upper": 5}]}, "features"),
    ({"features": [FEATURE, FEATURE]}, "features"),
    ({"resolution": 1 << 20}, "resolution"),
    ({"branching": 64, "levels": 4}, "resolution"),
    ({"max_examples_per_device": 0}, "max_examples_per_device"),
])
def test_bad_specs_name_the_field(over: dict, field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        KIND.parse_params(_params(**over))


def test_under_noise_the_rank_error_is_small_and_the_intervals_cover() -> None:
    """2,000 devices with 1–3 heavy-tailed values, ε = 1: every quantile within 6 % of the values in rank, and the
    95 % intervals cover the true quantile in at least 90 % of 40 runs (each quantile)."""
    rng = np.random.default_rng(7)
    devices = [[{"ms": float(v)} for v in rng.lognormal(5, 0.9, size=int(rng.integers(1, 4)))] for _ in range(2000)]
    values = np.sort(np.clip([r["ms"] for d in devices for r in d], 0, 1000))
    covered = {q: 0 for q in (0.1, 0.5, 0.9)}
    runs = 40
    for seed in range(runs):
        run = run_query(KIND, _params(), devices, privacy={"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
                        rng=np.random.default_rng(seed), noise_source=SeededRandom(b"quantiles-%d" % seed))
        f = run.result["features"]["ms"]
        for q in covered:
            v = f["quantiles"][repr(q)]
            rank = np.searchsorted(values, v) / len(values)
            assert abs(rank - q) < 0.06, (seed, q, rank)  # ≈ 2 stds of the rank error here
            lo, hi = run.release.intervals[f"/features/ms/quantiles/{q!r}"]
            assert f["ci95"][repr(q)] == [lo, hi] and lo <= v <= hi  # in the result too (design: each with its interval)
            truth = float(np.quantile(values, q, method="inverted_cdf"))
            covered[q] += lo <= truth <= hi
    assert all(c >= 0.9 * runs for c in covered.values()), covered


def test_preview_gives_the_count_s_noise_and_each_quantile_s_rank_error() -> None:
    from queries.kind import RoundPreview

    params = KIND.parse_params(_params())
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    values, warnings = KIND.preview(params, [RoundPreview(plan, std=30.0, contributors=200)])
    paths = {v.path: v for v in values}
    assert set(paths) == {"/features/ms/count", *(f"/features/ms/quantiles/{q!r}" for q in (0.1, 0.5, 0.9))}
    assert all(v.std > 0 and math.isfinite(v.std) for v in values)
    assert warnings  # 200 devices at σ 30 per node: the ranks are known to worse than 5 %


def test_a_json_integer_beyond_any_float_is_missing_not_a_crash() -> None:
    params = KIND.parse_params(_params(resolution=16, branching=4))
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    vec = KIND.contribute(plan.typed_task(KIND), [{"ms": 10 ** 400}, {"ms": 5.0}], np.random.default_rng(0))
    assert vec[0] == 1  # only the finite value counts
