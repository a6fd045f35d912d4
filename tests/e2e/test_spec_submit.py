"""Submitting specs to a real server process: every size bounded (oversized specs are refused cheaply, the
server process stays small). Noise plans the devices could not run and the production policy are answers only:
tests/analytics_server/test_spec_validation.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analyst_client.cli import AnalystClient, ApiError
from tests.e2e.harness import Server, server_on_fresh_sqlite

pytestmark = pytest.mark.e2e

RSS_LIMIT_MB = 400


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, AnalystClient]]:
    with server_on_fresh_sqlite(tmp_path_factory.mktemp("spec-demo")) as srv:
        yield srv, AnalystClient(srv.url, srv.token("analyst"))


def _rss_mb(srv: Server) -> float:
    assert srv.proc is not None
    for line in Path(f"/proc/{srv.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _refused(client: AnalystClient, spec: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(ApiError) as info:
        client.submit(spec)
    return info.value.status, info.value.message


def _training(**params: Any) -> dict[str, Any]:
    return {"kind": "training", "source": "examples", "params": {"rounds": 2, **params}}


FS_FEATURES = [{"name": f"f{i}", "lower": 0.0, "upper": 1.0} for i in range(10)]
OVERSIZED = [
    (_training(model={"name": "logistic", "n_features": 2**31}), "model.n_features"),
    (_training(model={"name": "logistic", "n_features": 10**7}), "model.n_features"),
    (_training(model={"name": "mlp", "n_features": 10, "hidden": 10**9, "n_classes": 2}), "model.hidden"),
    (_training(model={"name": "softmax", "n_features": 10, "n_classes": 10**9}), "model.n_classes"),
    (_training(model={"name": "mlp", "n_features": 1000, "hidden": 1000, "n_classes": 10}), "parameters, more than the limit"),
    (_training(model={"name": "logistic", "n_features": 3, "seed": 2**80}), "model.seed"),
    (_training(model={"name": "logistic", "n_features": 3}, rounds=10**9), "rounds"),
    (_training(model={"name": "logistic", "n_features": 3}, clients_per_round=10**9), "clients_per_round"),
    (_training(model={"name": "logistic", "n_features": 3}, features=["x" * 1000, "b", "c"]), "features.0"),
    ({"kind": "histogram", "source": "s", "params": {"buckets": ["x" * 10_000]}}, "buckets.0"),
    ({"kind": "histogram", "source": "s", "params": {"buckets": ["a"], "max_contributions_per_device": 10**6}},
     "max_contributions_per_device"),
    ({"kind": "feature_stats", "source": "s", "params": {"features": FS_FEATURES, "bins": 10**6}}, "bins"),
    ({"kind": "feature_stats", "source": "s", "params": {"features": FS_FEATURES * 101}}, "features"),
    ({"kind": "feature_stats", "source": "s",
      "params": {"features": [{"name": "x", "lower": -1.5e308, "upper": 1.5e308}]}}, "upper − lower"),
    ({"kind": "heavy_hitters", "source": "s", "params": {"mode": "secagg", "max_length": 10**6}}, "max_length"),
    ({"kind": "heavy_hitters", "source": "s", "params": {"mode": "secagg", "alphabet": "".join(map(chr, range(0x4E00, 0x4F00)))}},
     "alphabet"),
    ({"kind": "heavy_hitters", "source": "s", "params": {"mode": "secagg", "max_frontier": 10**6}}, "max_frontier"),
    ({"kind": "heavy_hitters", "source": "s", "params": {"mode": "triehh", "theta": 10**7, "sample_rate": 1e-8}}, "theta"),
    ({"kind": "histogram", "source": "s", "params": {"buckets": ["a"]}, "cohort": {"min_clients": 10**9}},
     "cohort.min_clients"),
    ({"kind": "histogram", "source": "s", "params": {"buckets": ["a"]}, "privacy": {"epsilon": 1e9}}, "privacy.epsilon"),
    ({"kind": "histogram", "source": "s", "name": "n" * 10_000, "params": {"buckets": ["a"]}}, "name"),
    ({"kind": "histogram", "source": "s", "params": {"buckets": ["a"], **{f"k{i}": 1 for i in range(200)}}}, "params"),
]


def test_oversized_specs_are_refused_naming_the_field(demo: tuple[Server, AnalystClient]) -> None:
    srv, client = demo
    for spec, field in OVERSIZED:
        status, msg = _refused(client, spec)
        assert status == 422 and field in msg, (spec["kind"], field, msg[:300])
    assert client.call("GET", "/healthz")["status"] == "ok"
    rss = _rss_mb(srv)
    print(f"server RSS after {len(OVERSIZED)} oversized specs: {rss:.0f} MB")
    assert rss < RSS_LIMIT_MB
