"""The histogram kind: spec validation, bounded contributions, exact decoding, thresholds."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from queries.histogram import HistogramState
from queries.kind import AggregateNoise, QueryKindError
from queries.local_run import run_locally
from queries.registry import get_kind

KIND = get_kind("histogram")
BUCKETS = ["red", "green", "blue"]
RNG = np.random.default_rng(0)  # histogram contributions use no randomness


def test_registered_and_one_round():
    params = KIND.parse_params({"buckets": BUCKETS})
    state = KIND.initial_state(params)
    plan = KIND.plan_round(params, state, 0)
    assert plan.dim == 3 and plan.max_abs == 1 and plan.l1_sensitivity == 1.0
    state = KIND.decode_round(params, state, plan, np.array([1, 0, 2]), 3)
    assert KIND.plan_round(params, state, 1) is None


@pytest.mark.parametrize(
    "raw, field",
    [
        ({}, "buckets"),
        ({"buckets": []}, "buckets"),
        ({"buckets": ["a", "a"]}, "buckets"),
        ({"buckets": ["a", ""]}, "buckets"),
        ({"buckets": "abc"}, "buckets"),
        ({"buckets": ["a"], "max_contributions_per_device": 2}, "max_contributions_per_device"),
        ({"buckets": ["a"], "other_bucket": "a"}, "other_bucket"),
        ({"buckets": ["a"], "colour": 1}, "colour"),
    ],
)
def test_bad_params_name_the_field(raw, field):
    with pytest.raises(ValidationError) as err:
        KIND.parse_params(raw)
    assert field in str(err.value)


def test_device_votes_for_its_most_frequent_value_only():
    task = KIND.plan_round(KIND.parse_params({"buckets": BUCKETS}), HistogramState(done=False), 0).typed_task(KIND)
    assert KIND.contribute(task, ["blue", "red", "blue", "purple"], RNG).tolist() == [0, 0, 1]
    assert KIND.contribute(task, [], RNG).tolist() == [0, 0, 0]
    assert KIND.contribute(task, ["purple", None, 3.5, {"x": 1}], RNG).tolist() == [0, 0, 0]
    assert KIND.contribute(task, [{"value": "green"}], RNG).tolist() == [0, 1, 0]


def test_other_bucket_and_multi_hot():
    params = KIND.parse_params({"buckets": ["1", "2"], "other_bucket": "other", "max_contributions_per_device": 2})
    task = KIND.plan_round(params, KIND.initial_state(params), 0).typed_task(KIND)
    assert KIND.contribute(task, [1, 1, 7, 2, 2, 2], RNG).tolist() == [1, 1, 0]
    assert KIND.contribute(task, [9, 9, 1], RNG).tolist() == [1, 0, 1]


def test_malformed_task_is_a_typed_error():
    with pytest.raises(QueryKindError, match="task"):
        KIND.parse_task({"buckets": 3})


@given(
    rows=st.lists(st.one_of(st.sampled_from(BUCKETS + ["x"]), st.integers(), st.none()), max_size=30),
    k=st.integers(1, 3),
)
def test_contribution_respects_the_declared_bounds(rows, k):
    params = KIND.parse_params({"buckets": BUCKETS, "max_contributions_per_device": k})
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    vec = KIND.contribute(plan.typed_task(KIND), rows, RNG)
    assert vec.shape == (plan.dim,) and vec.dtype == np.int64
    assert np.abs(vec).max(initial=0) <= plan.max_abs
    assert np.abs(vec).sum() <= plan.l1_sensitivity
    assert np.sqrt((vec.astype(float) ** 2).sum()) <= plan.l2_sensitivity + 1e-12


def test_exact_without_noise():
    rng = np.random.default_rng(5)
    devices = [list(rng.choice(BUCKETS + ["other"], size=rng.integers(0, 5))) for _ in range(300)]
    result, contributors = run_locally(KIND, {"buckets": BUCKETS}, devices)
    truth = {b: 0 for b in BUCKETS}
    for rows in devices:
        counts = {b: rows.count(b) for b in BUCKETS if rows.count(b)}
        if counts:
            best = sorted(counts.items(), key=lambda kv: (-kv[1], BUCKETS.index(kv[0])))[0][0]
            truth[best] += 1
    assert result["counts"] == truth
    assert result["suppressed"] == [] and result["clients"] == 300 == contributors[0]


def test_noisy_counts_under_the_threshold_are_listed_as_suppressed():
    params = KIND.parse_params({"buckets": BUCKETS, "false_release_rate": 0.01})
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    noise = AggregateNoise(std=5.0)
    state = KIND.decode_round(params, KIND.initial_state(params), plan, np.array([100, 3, -2]), 200, noise)
    release = KIND.finalize(params, state)
    result = release.result
    assert result["counts"] == {"red": 100}
    assert result["suppressed"] == ["green", "blue"]
    assert result["threshold"] == math.ceil(NormalDist().inv_cdf(1 - 0.01 / 3) * 5.0)
    assert release.thresholds == {"release_threshold": result["threshold"]}
    assert release.noise_std == {"/counts/red": 5.0}


def test_fixed_release_threshold():
    params = KIND.parse_params({"buckets": BUCKETS, "release_threshold": 10})
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    state = KIND.decode_round(params, KIND.initial_state(params), plan, np.array([10, 9, 0]), 20)
    release = KIND.finalize(params, state)
    assert release.result["suppressed"] == ["green", "blue"]
    assert release.thresholds == {"release_threshold": 10} and release.noise_std == {}
