"""Acceptance: feature_stats over HTTP on sklearn's breast-cancer data, label-skewed over 50
devices with NaN/inf/missing values injected. No noise: count/mean/var equal numpy on the pooled clipped
data to 1e-6 relative and the scaler block loads into a StandardScaler that transforms like a central one.
With DP (ε = 1, Skellam): each released mean lies within its reported noise std (widened to 99.99 %), with
its 95 % interval and warnings in the answer. A server process per test: a stopped fleet's devices stay
available for seconds, and the next query's cohort, which needs every device, would seat them and sit out its
phase deadline. (Bad specs → 422 naming the field: tests/analytics_server/test_spec_validation.py.)"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest
from sklearn.preprocessing import StandardScaler

from analyst_client.cli import AnalystClient
from fleet_sim.scenarios.datasets import (
    BREAST_CANCER_SHARDS,
    breast_cancer_feature_bounds,
    breast_cancer_feature_names,
    feature_matrix,
)
from tests.e2e.harness import Fleet, Server, audit_clean, server_on_fresh_sqlite

pytestmark = pytest.mark.e2e
DEVICES = BREAST_CANCER_SHARDS  # 50: the fleet holds every row once


@pytest.fixture
def fs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with server_on_fresh_sqlite(tmp_path_factory.mktemp("fs")) as srv:
        yield srv


def _features(names: list[str]) -> list[dict[str, Any]]:
    bounds = breast_cancer_feature_bounds()
    out = []
    for name in names:
        lo, hi = bounds[name]
        if name == "mean_radius":
            hi = 20.0  # below the data's max (28.1): clipping must happen
        out.append({"name": name, "lower": lo, "upper": hi})
    return out


def _spec(features: list[dict[str, Any]], privacy: dict[str, Any], min_count: int = 1) -> dict[str, Any]:
    return {
        "kind": "feature_stats",
        "source": "features",
        "params": {"features": features, "max_examples_per_device": 12, "min_count": min_count},
        "privacy": privacy,
        "cohort": {"min_clients": DEVICES, "max_clients": DEVICES, "phase_timeout_s": 10},
    }


def _pooled(fleet: Fleet, admin: AnalystClient, qid: str, features: list[dict[str, Any]]) -> np.ndarray:
    """The clipped pooled matrix over the devices that contributed (the same set in both rounds)."""
    rounds = admin.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"]
    assert set(rounds["0"]) == set(rounds["1"]) and len(rounds["0"]) == DEVICES
    truth = fleet.truth()
    rows = [row for d in rounds["0"] for row in truth[d]["features"]]
    X = feature_matrix(rows, [f["name"] for f in features])
    return np.clip(X, [f["lower"] for f in features], [f["upper"] for f in features])


def test_no_noise_matches_numpy_and_sklearn(fs_server: Server, tmp_path: Path) -> None:
    admin = AnalystClient(fs_server.url, fs_server.token("admin"))
    features = _features(breast_cancer_feature_names())
    spec = _spec(features, {"mechanism": "none"})
    fleet = Fleet(fs_server.url, DEVICES, tmp_path, scenario="breast_cancer", seed=5)
    try:
        qid = AnalystClient(fs_server.url, fs_server.token("analyst")).submit(spec)["id"]
        final = admin.wait(qid, timeout_s=180)
        assert final["status"] == "succeeded", final
        res = admin.result(qid)
        X = _pooled(fleet, admin, qid, features)
    finally:
        fleet.stop()
    assert np.isnan(X).sum() > 0, "the scenario should inject missing values"
    got = res["result"]["features"]
    count = (~np.isnan(X)).sum(axis=0)
    mean = np.nanmean(X, axis=0)
    var = np.nanvar(X, axis=0)
    for j, f in enumerate(features):
        g = got[f["name"]]
        assert g["count"] == pytest.approx(count[j], rel=1e-9), f["name"]
        assert g["mean"] == pytest.approx(mean[j], rel=1e-6), f["name"]
        assert g["var"] == pytest.approx(var[j], rel=1e-6), f["name"]
        assert g["std"] == pytest.approx(math.sqrt(var[j]), rel=1e-6), f["name"]
    assert np.nanmax(X[:, 0]) == 20.0  # clipped

    central = StandardScaler().fit(X)
    block = res["result"]["scaler"]
    loaded = StandardScaler()
    for attr in ("mean_", "var_", "scale_", "n_samples_seen_"):
        setattr(loaded, attr, np.asarray(block[attr]))
    loaded.n_features_in_ = block["n_features_in_"]
    np.testing.assert_allclose(loaded.transform(X), central.transform(X), rtol=1e-6, atol=1e-9)
    assert res["privacy"]["mechanism"] == "none"


def test_dp_means_within_their_999_intervals(fs_server: Server, tmp_path: Path) -> None:
    admin = AnalystClient(fs_server.url, fs_server.token("admin"))
    names = ["mean_radius", "mean_texture", "mean_smoothness", "worst_area", "mean_symmetry"]
    features = _features(names)
    spec = _spec(features, {"epsilon": 1.0, "delta": 1e-6, "mechanism": "skellam"}, min_count=50)
    fleet = Fleet(fs_server.url, DEVICES, tmp_path, scenario="breast_cancer", seed=6)
    try:
        qid = AnalystClient(fs_server.url, fs_server.token("analyst")).submit(spec)["id"]
        final = admin.wait(qid, timeout_s=180)
        assert final["status"] == "succeeded", final
        res = admin.result(qid)
        X = _pooled(fleet, admin, qid, features)
    finally:
        fleet.stop()
    privacy = res["privacy"]
    assert privacy["mechanism"] == "skellam" and privacy["epsilon"] == pytest.approx(1.0, rel=1e-6)
    assert [e["purpose"] for e in privacy["noise"]] == ["counts and means", "variances"]
    released = res["result"]["features"]
    assert set(released) | set(res["result"]["suppressed"]) == set(names)
    z = NormalDist().inv_cdf(1 - 0.0001 / 2)  # the reported std, widened to 99.99 % per feature
    errors = {}
    for j, f in enumerate(features):
        if f["name"] not in released:
            continue
        x = X[:, j][~np.isnan(X[:, j])]
        got = released[f["name"]]
        u = res["uncertainty"][f"/features/{f['name']}/mean"]
        assert u["ci95"][0] <= got["mean"] <= u["ci95"][1] and f["lower"] <= u["ci95"][0]
        assert abs(got["mean"] - float(x.mean())) <= z * u["std"] + 1e-9, (f["name"], got["mean"], x.mean(), u)
        assert got["count"] >= 0 and res["uncertainty"][f"/features/{f['name']}/count"]["std"] > 0
        errors[f["name"]] = (round(got["mean"] - float(x.mean()), 4), round(u["std"], 4))
    assert res["warnings"], "fifty devices at ε = 1: the answer must warn about its wide intervals"
    print("feature_stats DP ε=1 mean (error, reported std): %s" % errors)
    audit_clean(fs_server.url, fs_server.token("admin"))
