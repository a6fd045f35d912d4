"""feature_stats: exactness against numpy on pooled clipped data, the scikit-learn scaler block,
missing and non-finite values, and spec validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from queries.feature_stats import FeatureStatsKind, FeatureStatsParams, StandardScaling
from queries.local_run import run_locally

KIND = FeatureStatsKind()


def label_skewed_devices(x: np.ndarray, y: np.ndarray, names: list[str], n_devices: int, seed: int):
    """Each device holds mostly one class (80/20), so per-device statistics differ from the global ones."""
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(np.flatnonzero(y == c)) for c in (0, 1)])
    chunks = np.array_split(order, n_devices)
    return [[{n: float(v) for n, v in zip(names, x[i])} for i in chunk] for chunk in chunks]


@pytest.fixture(scope="module")
def cancer():
    data = load_breast_cancer()
    names = [n.replace(" ", "_") for n in data.feature_names]
    return data.data, data.target, names


def spec_for(x: np.ndarray, names: list[str], margin: float = 0.0):
    lo, hi = x.min(axis=0), x.max(axis=0)
    return [{"name": n, "lower": float(a - margin * (b - a)), "upper": float(b + margin * (b - a))}
            for n, a, b in zip(names, lo, hi)]


def test_matches_numpy_on_pooled_clipped_data_and_sklearn_scaler(cancer):
    x, y, names = cancer
    devices = label_skewed_devices(x, y, names, 50, seed=3)
    features = spec_for(x, names)
    features[0]["upper"] = float(np.percentile(x[:, 0], 90))  # make clipping matter for one feature
    result, contributors = run_locally(KIND, {"features": features, "max_examples_per_device": 20}, devices)
    assert contributors == [50, 50]
    clipped = np.column_stack([np.clip(x[:, j], f["lower"], f["upper"]) for j, f in enumerate(features)])
    for j, name in enumerate(names):
        got = result["features"][name]
        assert got["count"] == len(x)
        assert math.isclose(got["mean"], clipped[:, j].mean(), rel_tol=1e-6)
        assert math.isclose(got["var"], clipped[:, j].var(), rel_tol=1e-6)
        assert math.isclose(got["sample_var"], clipped[:, j].var(ddof=1), rel_tol=1e-6)
        assert math.isclose(got["std"], clipped[:, j].std(), rel_tol=1e-6)

    scaler = StandardScaler()
    for attr in ("mean_", "var_", "scale_"):
        setattr(scaler, attr, np.asarray(result["scaler"][attr]))
    scaler.n_samples_seen_ = np.asarray(result["scaler"]["n_samples_seen_"])
    scaler.n_features_in_ = result["scaler"]["n_features_in_"]
    central = StandardScaler().fit(clipped)
    np.testing.assert_allclose(scaler.transform(clipped), central.transform(clipped), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(StandardScaling(result).transform(clipped), central.transform(clipped), rtol=1e-5, atol=1e-6)


def test_missing_and_non_finite_values_are_missing_not_zero():
    devices = [
        [{"a": 1.0, "b": float("nan")}, {"a": float("inf")}, {"b": 4.0}],
        [{"a": 3.0, "b": None}, {"a": "x", "b": 6.0}, {"a": -float("inf"), "b": 5.0}],
    ]
    spec = {"features": [{"name": "a", "lower": 0, "upper": 10}, {"name": "b", "lower": 0, "upper": 10}]}
    result, _ = run_locally(KIND, spec, devices)
    assert result["features"]["a"]["count"] == 2 and math.isclose(result["features"]["a"]["mean"], 2.0)
    assert result["features"]["b"]["count"] == 3 and math.isclose(result["features"]["b"]["mean"], 5.0)
    assert math.isclose(result["features"]["b"]["var"], 2.0 / 3.0, rel_tol=1e-9)


def test_precision_with_wide_bounds_around_a_large_mean():
    """Spread 1 around 10,000 inside bounds [0, 20,000]: var/range² = 2.5e-9. Centring round 2 on the
    global mean keeps this exact to ~1e-5; the precision floor is ~2^-K·range² per example."""
    rng = np.random.default_rng(0)
    values = 1e4 + rng.normal(0, 1.0, 2000)
    devices = [[{"v": float(v)} for v in chunk] for chunk in np.array_split(values, 40)]
    spec = {"features": [{"name": "v", "lower": 0, "upper": 2e4}]}
    result, _ = run_locally(KIND, spec, devices)
    assert math.isclose(result["features"]["v"]["mean"], values.mean(), rel_tol=1e-9)
    assert math.isclose(result["features"]["v"]["var"], values.var(), rel_tol=1e-4)


def test_histogram_bins_and_suppression():
    devices = [[{"a": 0.5}, {"a": 9.9}], [{"a": 5.0}], [{"c": 1.0}]]
    spec = {"features": [{"name": "a", "lower": 0, "upper": 10}, {"name": "c", "lower": 0, "upper": 1}],
            "bins": 2, "min_count": 2}
    result, _ = run_locally(KIND, spec, devices)
    assert result["features"]["a"]["histogram"]["counts"] == [1.0, 2.0]
    assert result["features"]["a"]["histogram"]["edges"] == [0.0, 5.0, 10.0]
    assert result["suppressed"] == ["c"]


@pytest.mark.parametrize(
    "features, field",
    [
        ([{"name": "a", "lower": 1, "upper": 1}], "features.0"),
        ([{"name": "a", "lower": float("nan"), "upper": 1}], "features.0.lower"),
        ([{"name": "a", "lower": 0, "upper": float("inf")}], "features.0.upper"),
        ([{"name": "a", "lower": 0, "upper": 1}, {"name": "a", "lower": 0, "upper": 2}], "features"),
        ([], "features"),
    ],
)
def test_bad_specs_name_the_field(features, field):
    with pytest.raises(ValidationError) as exc:
        KIND.parse_params({"features": features})
    locs = {".".join(str(p) for p in err["loc"]) for err in exc.value.errors()}
    assert field in locs


def test_bind_privacy_coarsens_precision_only_for_noisy_queries() -> None:
    from queries.feature_stats import NOISY_PRECISION_BITS, FeatureStatsParams
    from queries.registry import get_kind
    from queries.spec import PrivacySpec

    kind = get_kind("feature_stats")
    raw = {"features": [{"name": "a", "lower": 0.0, "upper": 1.0}]}
    assert kind.bind_privacy(raw, PrivacySpec(validation="none")) == raw
    noisy = kind.bind_privacy(raw, PrivacySpec(epsilon=1.0, delta=1e-6, mechanism="skellam", validation="none"))
    assert FeatureStatsParams.model_validate(noisy).scale_exp == NOISY_PRECISION_BITS
    assert FeatureStatsParams.model_validate(raw).scale_exp > NOISY_PRECISION_BITS
    chosen = {**raw, "precision_bits": 20}
    assert kind.bind_privacy(chosen, PrivacySpec(epsilon=1.0, delta=1e-6, mechanism="skellam", validation="none")) == chosen


def test_release_reports_the_noise_of_counts_and_bins_and_finalizes_early() -> None:
    from queries.kind import AggregateNoise

    params = KIND.parse_params({"features": [{"name": "a", "lower": 0, "upper": 10}], "bins": 2, "max_examples_per_device": 5})
    unit = float(1 << params.scale_exp)
    rng = np.random.default_rng(0)
    devices = [[{"a": 1.0}, {"a": 6.0}], [{"a": 9.0}]]
    state = KIND.initial_state(params)
    early = KIND.finalize(params, state, stop_reason="privacy budget exhausted")
    assert early.result["suppressed"] == ["a"] and early.result["features"] == {} and early.noise_std == {}
    for r, std in enumerate([2.0 * unit, 3.0 * unit]):
        plan = KIND.plan_round(params, state, r)
        agg = sum(KIND.contribute(plan.typed_task(KIND), rows, rng) for rows in devices)
        state = KIND.decode_round(params, state, plan, agg, len(devices), AggregateNoise(std=std))
        if r == 0:  # stopped between the rounds: means known, variances not → suppressed, nothing fails
            assert KIND.finalize(params, state, "privacy budget exhausted").result["suppressed"] == ["a"]
    release = KIND.finalize(params, state)
    assert release.result["features"]["a"]["count"] == 3 and release.result["features"]["a"]["histogram"]["counts"] == [1, 2]
    # the count combines round 1's count (std 2) with the bins' sum (two bins of std 3): 1/(1/4 + 1/18)
    assert release.noise_std["/features/a/count"] == pytest.approx(math.sqrt(1 / (1 / 4 + 1 / 18)))
    assert release.noise_std["/features/a/histogram/counts/0"] == release.noise_std["/features/a/histogram/counts/1"] == 3.0
    assert {"/features/a/mean", "/features/a/var", "/features/a/std", "/scaler/mean_/0"} <= set(release.noise_std)


def test_a_rounded_count_lies_in_its_own_interval() -> None:
    """A noisy count of 0.29 is released as 0: its 95 % interval is taken around the released 0 (clamped at 0),
    not around 0.29 (whose interval [0.01, 0.57] would not hold the printed value)."""
    from queries.feature_stats import FeatureSpec, FeatureStatsState, _feature_entry

    spec = FeatureSpec(name="x", lower=0.0, upper=1.0)
    state = FeatureStatsState(stage=2, bound=1, counts=[0.288], means=[0.5], firsts=[0.1], seconds=[0.01])
    entry, stds, ivs, _ = _feature_entry(spec, state, 0, 0.144, 0.0, 0)
    assert entry["count"] == 0
    lo, hi = ivs[("count",)]
    assert lo == 0.0 <= entry["count"] <= hi and hi == pytest.approx(1.959963984540054 * 0.144)


# ---------------------------------------------------------------- the typed task (FeatureStatsTask)
def _fs_tasks() -> dict[str, dict]:
    """The task of each stage as plan_round emits it."""
    from queries.feature_stats import FeatureStatsState

    kind = FeatureStatsKind()
    bounded = kind.parse_params({"features": [{"name": "age", "lower": 18, "upper": 90}], "max_examples_per_device": 3, "bins": 2})
    from_data = kind.parse_params({"features": [{"name": "age", "lower": 18, "upper": 90}]})
    plans = {
        "row_counts": kind.plan_round(from_data, kind.initial_state(from_data), 0),
        "first_moments": kind.plan_round(bounded, kind.initial_state(bounded), 0),
        "second_moments": kind.plan_round(bounded, FeatureStatsState(bound=3, stage=1, means=[40.0]), 1),
    }
    return {stage: plan.task for stage, plan in plans.items() if plan is not None}


def test_every_stage_plans_a_task_its_parser_accepts_and_round_trips() -> None:
    kind = FeatureStatsKind()
    tasks = _fs_tasks()
    assert sorted(tasks) == ["first_moments", "row_counts", "second_moments"]
    for stage, task in tasks.items():
        assert task["stage"] == stage
        assert kind.task_json(kind.parse_task(task)) == task


@pytest.mark.parametrize("spoil, field", [
    ({"stage": "third_moments"}, "stage"),
    ({"stage": None}, "stage"),
    ({"scale_exp": "3"}, "scale_exp"),
    ({"max_examples": True}, "max_examples"),
    ({"bins": 3.7}, "bins"),
    ({"means": [None] * 1001}, "means"),
    ({"means": []}, "means"),
    ({"extra": 1}, "extra"),
])
def test_a_spoiled_second_moments_task_is_refused_naming_the_field(spoil: dict, field: str) -> None:
    from queries.kind import QueryKindError

    kind = FeatureStatsKind()
    bad = _fs_tasks()["second_moments"] | spoil
    with pytest.raises(QueryKindError, match=f"^task.{field}:"):  # the one parse every method's caller makes
        kind.parse_task(bad)


def test_a_row_counts_grid_must_be_increasing_and_bounded() -> None:
    from queries.kind import QueryKindError

    kind = FeatureStatsKind()
    with pytest.raises(QueryKindError, match="^task.grid: bounds must be increasing"):
        kind.parse_task({"stage": "row_counts", "grid": [1, 3, 2]})
    with pytest.raises(QueryKindError, match="^task.grid:"):
        kind.parse_task({"stage": "row_counts", "grid": list(range(1, 10_002))})
    with pytest.raises(QueryKindError, match="^task.grid:"):
        kind.parse_task({"stage": "row_counts"})


def test_first_moments_are_centred_and_a_mid_range_mean_carries_half_the_moment_noise() -> None:
    """The first moment is Σ (2·(x − lower)/range − 1): a row at `lower` adds −2^K, one at `upper` +2^K, so the
    moment lies in [−count, count] (the statement refuses more), and the mean's noise is (range/2)·σ/count·√(1 + ν²)
    with ν the centred mean — at mid-range half what an uncentred Σ (x − lower)/range would give (range·σ/count·√1.25
    there), and no share of the count's noise."""
    from queries.kind import AggregateNoise

    params = KIND.parse_params({"features": [{"name": "a", "lower": 0, "upper": 10}], "max_examples_per_device": 2})
    unit = 1 << params.scale_exp
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    assert plan.task["first_moment"] == "centred"
    rng = np.random.default_rng(0)
    assert KIND.contribute(plan.typed_task(KIND), [{"a": 0.0}, {"a": 10.0}, {"a": 10.0}], rng).tolist() == [2 * unit, 2 * unit]
    assert KIND.contribute(plan.typed_task(KIND), [{"a": 0.0}], rng).tolist() == [unit, -unit]
    statement = KIND.validity(plan.typed_task(KIND))
    top = 2 * unit
    assert statement.check([top, -top]) is None and statement.check([unit, unit]) is None
    assert statement.check([unit, -2 * unit]) is not None and statement.check([unit, 2 * unit]) is not None
    uncentred = {k: v for k, v in plan.task.items() if k != "first_moment"}
    with pytest.raises(Exception, match="first_moment"):
        KIND.parse_task(uncentred)
    devices = [[{"a": 4.0}, {"a": 6.0}]] * 50  # mean 5: mid-range
    state = KIND.initial_state(params)
    agg = sum(KIND.contribute(plan.typed_task(KIND), rows, rng) for rows in devices)
    sigma = 3.0 * unit
    state = KIND.decode_round(params, state, plan, agg, len(devices), AggregateNoise(std=sigma))
    assert state.means == [pytest.approx(5.0)]
    plan2 = KIND.plan_round(params, state, 1)
    agg2 = sum(KIND.contribute(plan2.typed_task(KIND), rows, rng) for rows in devices)
    state = KIND.decode_round(params, state, plan2, agg2, len(devices), AggregateNoise(std=sigma))
    release = KIND.finalize(params, state)
    assert release.noise_std["/features/a/mean"] == pytest.approx(10 / 2 * 3.0 / 100)


# ---------------------------------------------------------------- the count in the second round (validity proofs)
TWO = [{"name": "a", "lower": 0.0, "upper": 10.0}, {"name": "b", "lower": 0.0, "upper": 1.0}]


def _bound(validation: str | None, **extra) -> FeatureStatsParams:
    """Params as the server binds them for a noise-free spec with this `privacy.validation` (None: unset, i.e. proofs)."""
    from queries.spec import PrivacySpec

    raw = {"features": TWO, "max_examples_per_device": 3, **extra}
    return KIND.parse_params(KIND.bind_privacy(raw, PrivacySpec(validation=validation)))


def _second_plan(params):
    from queries.feature_stats import FeatureStatsState

    return KIND.plan_round(params, FeatureStatsState(bound=3, stage=1, counts=[2.0, 1.0], means=[4.0, 0.5]), 1)


@pytest.mark.parametrize("validation", [None, "proofs"])
def test_with_proofs_the_second_round_carries_the_count_and_refuses_moments_without_rows(validation) -> None:
    """Without bins, a query with validity proofs sends one bin per feature — its count — in the second round, so
    the statement (second moment ≤ the bins' sum ≤ the bound) refuses the zero-rows lie: no rows, every second
    moment at its largest. Honest vectors, and a device with three rows at the far end, are accepted. The price is
    √2 in the round's L2 sensitivity (each example adds to its second moment and to its bin)."""
    params = _bound(validation)
    assert params.count_second_round and params.bins is None and params.second_round_bins == 1
    plan = _second_plan(params)
    assert plan.task["bins"] == 1 and plan.dim == 4  # 2 second moments, then 2 counts
    unit = 1 << params.scale_exp
    top = 3 * unit
    rng = np.random.default_rng(0)
    honest = KIND.contribute(plan.typed_task(KIND), [{"a": 0.0, "b": 1.0}, {"a": 10.0}, {"b": 0.25}], rng)
    assert honest.tolist()[2:] == [2 * unit, 2 * unit]  # the counts of present values
    statement = KIND.validity(plan.typed_task(KIND))
    assert statement.dim == plan.dim
    assert statement.check(honest.tolist()) is None
    assert statement.check(KIND.contribute(plan.typed_task(KIND), [], rng).tolist()) is None
    assert statement.check([top, top, top, top]) is None  # three rows at the far end: as large as it gets
    assert statement.check([top, top, 0, 0]) is not None  # the zero-rows lie
    assert statement.check([0, unit + 1, 0, unit]) is not None  # a second moment above its count
    assert statement.check([0, 0, top + 1, 0]) is not None  # more rows than the bound
    without = _second_plan(_bound("none"))
    _, l2 = KIND.task_sensitivity(plan.typed_task(KIND))
    assert l2 == pytest.approx(math.sqrt(2) * KIND.task_sensitivity(without.typed_task(KIND))[1])


def test_without_proofs_the_second_round_has_no_bins() -> None:
    """validation "none": nothing to tie, so the second round stays the second moments alone (its dimension and
    sensitivity unchanged); an analyst's explicit choice wins either way; an analyst's bins are the count."""
    params = _bound("none")
    assert not params.count_second_round and params.second_round_bins == 0
    plan = _second_plan(params)
    assert plan.task["bins"] == 0 and plan.dim == 2
    unit = 1 << params.scale_exp
    assert KIND.validity(plan.typed_task(KIND)).check([3 * unit, 3 * unit]) is None  # nothing ties it (no proofs are asked)
    assert KIND.task_sensitivity(plan.typed_task(KIND))[1] == pytest.approx(3 * unit * math.sqrt(2))  # √features, one entry each
    assert _second_plan(_bound(None, count_second_round=False)).task["bins"] == 0
    assert _second_plan(_bound("none", count_second_round=True)).task["bins"] == 1
    assert _second_plan(_bound(None, bins=3)).task["bins"] == 3


def test_the_count_bin_combines_into_the_count_and_no_histogram_is_released() -> None:
    """The one count bin is not a histogram the analyst asked for: the release has no `histogram` (nor its noise), but
    the count is the inverse-variance combination of round 1's count (std 2) and the bin (std 3): its std is
    1/√(1/4 + 1/9) ≈ 1.66, below round 1's alone, and a +10 error in round 1's count becomes ≈ +6.9. The preview
    says the same std. Without proofs the count is round 1's alone."""
    from queries.kind import AggregateNoise, RoundPreview

    rng = np.random.default_rng(0)
    devices = [[{"a": 1.0, "b": 0.5}, {"a": 6.0}], [{"a": 9.0, "b": 0.0}], [{"b": 1.0}]]

    def run(params, err: float):
        unit = float(1 << params.scale_exp)
        state, plans = KIND.initial_state(params), []
        for r, std in enumerate([2.0 * unit, 3.0 * unit]):
            plan = KIND.plan_round(params, state, r)
            plans.append(RoundPreview(plan, std, 3))
            agg = sum(KIND.contribute(plan.typed_task(KIND), rows, rng) for rows in devices)
            if r == 0:
                agg = agg + np.array([int(err * unit), 0, 0, 0], dtype=np.int64)  # noise on a's count
            state = KIND.decode_round(params, state, plan, agg, len(devices), AggregateNoise(std=std))
        return KIND.finalize(params, state), KIND.preview(params, plans)[0]

    combined = 1 / math.sqrt(1 / 4 + 1 / 9)
    release, preview = run(_bound(None), 10.0)
    a = release.result["features"]["a"]
    assert "histogram" not in a and "histogram" not in release.result["features"]["b"]
    assert not any("histogram" in path for path in release.noise_std) and not any("histogram" in v.path for v in preview)
    assert release.noise_std["/features/a/count"] == pytest.approx(combined) and combined < 2.0
    assert a["count"] == round(3 + 10 * (1 / 4) / (1 / 4 + 1 / 9)) == 10  # not 13: the bin pulls it back
    assert release.result["features"]["b"]["count"] == 3
    assert {v.path: v.std for v in preview}["/features/a/count"] == pytest.approx(combined)
    alone, preview = run(_bound("none"), 10.0)
    assert alone.noise_std["/features/a/count"] == 2.0 and alone.result["features"]["a"]["count"] == 13
    assert {v.path: v.std for v in preview}["/features/a/count"] == 2.0
    hist, _ = run(_bound(None, bins=2), 0.0)  # the analyst's bins: released, as before
    assert hist.result["features"]["a"]["histogram"]["counts"] == [1, 2]
