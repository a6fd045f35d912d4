"""The kind contract, checked over every kind in `queries.registry` (a new kind is covered automatically).

For generated valid params and generated device rows — including extreme but valid rows — every round a
query can reach is planned and contributed to, and:
- each contribution is an int64 vector of length `plan.dim` with every entry within `plan.max_abs`;
- its L1 and L2 norms are within the plan's declared `l1_sensitivity`/`l2_sensitivity` (what the DP
  noise is calibrated for), which equal the kind's `task_sensitivity` of the task when it has one (the
  bounds a device recomputes its noise floor from), and, multiplied by the encoding scale s the server picks for a noisy round,
  within the sensitivities the server's round noise is calibrated for;
- the state survives the server's JSON round trip, and the plan from the reloaded state is the same;
- `finalize` works from every reachable state (the initial one, after each round decoded from the sum of
  the contributions with and without noise), with and without a stop reason, and returns a `Release`
  whose result and thresholds are JSON and whose noise std keys point at numbers in the result; its
  described uncertainty (`queries.uncertainty.describe`) has an interval around every value and JSON warnings;
- `preview` over the planned rounds names JSON Pointers with finite, non-negative stds.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from analytics_server import privacy
from queries import dp
from queries.kind import AggregateNoise, QueryKind, Release, RoundPlan, RoundPreview
from queries.uncertainty import describe
from queries.registry import KINDS
from tests.queries.strategies import kind_data

MAX_ROUNDS = 16
"""Generated params keep every kind's query short; a longer one fails the test."""
STOP = "privacy budget exhausted"


@functools.cache
def _calibration(rounds: int) -> dp.QueryCalibration:
    """A noisy calibration whose encoding scale s > 1 for small sensitivities (discrete Gaussian, t_min 1000)."""
    return dp.calibrate_query("discrete_gaussian", 1.0, 1e-6, rounds=rounds, t_min=1000)


def _pointer(doc: Any, path: str) -> Any:
    """Resolve a JSON Pointer (RFC 6901)."""
    for token in path.split("/")[1:]:
        key = token.replace("~1", "/").replace("~0", "~")
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    return doc


def _check_contribution(vec: np.ndarray, plan: RoundPlan, calibration: dp.QueryCalibration) -> None:
    assert isinstance(vec, np.ndarray) and vec.dtype == np.int64, vec.dtype
    assert vec.shape == (plan.dim,), (vec.shape, plan.dim)
    assert int(np.abs(vec).max(initial=0)) <= plan.max_abs
    l1, l2 = float(np.abs(vec).sum()), float(np.linalg.norm(vec.astype(np.float64)))
    assert l1 <= plan.l1_sensitivity * (1 + 1e-12), ("L1", l1, plan.l1_sensitivity)
    assert l2 <= plan.l2_sensitivity * (1 + 1e-12), ("L2", l2, plan.l2_sensitivity)
    noise = privacy.round_noise(calibration, plan)  # what the server stores for a noisy round
    assert noise is not None
    s = privacy.encoding_scale(noise)
    scaled = vec.astype(np.float64) * s  # devices multiply by s before adding their noise share
    assert float(np.abs(scaled).sum()) <= noise.noise.l1 * (1 + 1e-12), ("scaled L1", s, noise.noise.l1)
    assert float(np.linalg.norm(scaled)) <= noise.noise.l2 * (1 + 1e-12), ("scaled L2", s, noise.noise.l2)


def _check_task_sensitivity(kind: QueryKind[Any, Any], plan: RoundPlan) -> None:
    """A kind that bounds its vectors from the task alone (what devices recompute their noise floor from) must
    agree with the sensitivities its plan declares; the task the device receives is the plan's, as JSON."""
    own = kind.task_sensitivity(kind.parse_task(json.loads(json.dumps(plan.task))))
    if own is not None:
        assert own == pytest.approx((plan.l1_sensitivity, plan.l2_sensitivity), rel=1e-12), (own, plan)


def _check_release(kind: QueryKind[Any, Any], params: Any, state: Any) -> dict[str, Any]:
    results = []
    for stop_reason in (None, STOP):
        release = kind.finalize(params, state, stop_reason)
        assert isinstance(release, Release)
        json.dumps(release.result, allow_nan=False)
        json.dumps(release.thresholds, allow_nan=False)
        for path, std in release.noise_std.items():
            assert isinstance(_pointer(release.result, path), (int, float)), path
            assert math.isfinite(std) and std > 0, (path, std)
        assert set(release.intervals) <= set(release.noise_std)
        values, warnings = describe(release)
        json.dumps([values, warnings], allow_nan=False)
        for path, u in values.items():
            v = _pointer(release.result, path)
            assert u["ci95"][0] - 1e-9 * (1 + abs(v)) <= v <= u["ci95"][1] + 1e-9 * (1 + abs(v)), (path, v, u)
        assert release.failure is None or isinstance(release.failure, str)
        results.append(release.result)
    return results[0]


def _reload(kind: QueryKind[Any, Any], state: Any) -> Any:
    """The server's round trip: state → JSON text in the database → state."""
    stored = json.dumps(kind.state_to_json(state), allow_nan=False)
    reloaded = kind.state_from_json(json.loads(stored))
    assert reloaded == state
    return reloaded


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_kind_contract(kind: QueryKind[Any, Any], data: st.DataObject) -> None:
    strategies = kind_data(kind)
    raw = data.draw(strategies.params, label="params")
    params = kind.parse_params(raw)
    calibration = _calibration(kind.rounds_upper_bound(params))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))

    state = kind.initial_state(params)
    state = _reload(kind, state)
    first_result = _check_release(kind, params, state)
    assert _check_release(kind, params, _reload(kind, state)) == first_result
    for index in range(MAX_ROUNDS + 1):
        plan = kind.plan_round(params, state, index)
        if plan is None:
            event(f"finished after {index} rounds")
            break
        assert index < MAX_ROUNDS, "query did not finish"
        assert plan == kind.plan_round(params, _reload(kind, state), index)
        json.dumps(plan.task, allow_nan=False)
        expected, notes = kind.preview(params, [RoundPreview(plan, 3.0, 10)])
        for v in expected:
            assert v.path.startswith("/") and math.isfinite(v.std) and v.std >= 0, v
        json.dumps([n.to_dict() for n in notes])
        _check_task_sensitivity(kind, plan)
        devices = data.draw(st.lists(strategies.rows(raw), min_size=1, max_size=4), label=f"round {index} rows")
        total = np.zeros(plan.dim, dtype=np.int64)
        statement = kind.validity(kind.parse_task(json.loads(json.dumps(plan.task))))  # what the device derives from the JSON
        if statement is not None:
            assert statement.dim == plan.dim
        for rows in devices:
            vec = kind.contribute(plan.typed_task(kind), rows, rng)
            _check_contribution(vec, plan, calibration)
            if statement is not None:  # every honest contribution satisfies the kind's validity statement
                assert statement.check(vec.tolist()) is None, statement.check(vec.tolist())
                assert statement.max_abs() >= int(np.abs(vec).max(initial=0))
            total += vec
        noise = None
        if data.draw(st.booleans(), label=f"round {index} noisy"):
            std = plan.l2_sensitivity * data.draw(st.sampled_from([0.1, 1.0, 10.0]), label="noise/Δ2")
            total += np.rint(rng.normal(0.0, std, plan.dim)).astype(np.int64)
            noise = AggregateNoise(std=std)
        state = kind.decode_round(params, state, plan, total, len(devices), noise)
        state = _reload(kind, state)
        _check_release(kind, params, state)
