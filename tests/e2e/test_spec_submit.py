"""Submitting specs to a real server process: every size bounded (oversized specs are refused cheaply, the
server stays small), noise plans the devices could not run refused at submit, and the production policy
(provisioned budgets, maximum δ, an explicit opt-in for kinds the server must be trusted with)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from device_sdk.analyst_cli import AnalystClient, ApiError
from tests.e2e.harness import Server, fresh_database

pytestmark = pytest.mark.e2e

RSS_LIMIT_MB = 400


def _server(tmp: Path, env: dict[str, str] | None = None) -> Server:
    url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
    fresh_database(url)
    return Server(url, tmp / "server.log", env=env).start()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, AnalystClient]]:
    tmp = tmp_path_factory.mktemp("spec-demo")
    srv = _server(tmp)
    yield srv, AnalystClient(srv.url, srv.token("analyst"))
    srv.stop()
    assert not srv.log_has_tracebacks(), (tmp / "server.log").read_text()[-5000:]


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


NOISY = {"epsilon": 1.0, "delta": 1e-6, "mechanism": "skellam"}


@pytest.mark.parametrize("spec, field", [
    # Skellam, 10 features, default max_examples_per_device, t_min 10, ε = 1: per-device μ 5.3e15 > 1e15.
    ({"kind": "feature_stats", "source": "s", "params": {"features": FS_FEATURES}, "privacy": NOISY,
      "cohort": {"min_clients": 10, "max_clients": 100}}, "params.precision_bits"),
    (_training(model={"name": "logistic", "n_features": 3}, precision_bits=30) | {"privacy": NOISY}, "params.precision_bits"),
    (_training(model={"name": "logistic", "n_features": 3}, precision_bits=34)
     | {"privacy": {**NOISY, "mechanism": "discrete_gaussian"}}, "params.precision_bits"),
    # No noise, but 100,000 contributions of up to 2^46 need more than a 62-bit ring.
    ({"kind": "feature_stats", "source": "s", "params": {"features": FS_FEATURES},
      "cohort": {"min_clients": 10, "max_clients": 100_000}}, "cohort.max_clients"),
    # A round that needs more contributors than a cohort may hold would never form.
    (_training(model={"name": "logistic", "n_features": 3}, clients_per_round=500) | {"cohort": {"max_clients": 100}},
     "cohort.max_clients"),
])
def test_noise_plans_the_devices_cannot_run_are_refused(demo: tuple[Server, AnalystClient], spec: dict[str, Any], field: str) -> None:
    _, client = demo
    status, msg = _refused(client, spec)
    assert status == 422 and msg.startswith(field), msg


def test_a_plan_within_the_samplers_limits_is_accepted(demo: tuple[Server, AnalystClient]) -> None:
    _, client = demo
    spec = {"kind": "feature_stats", "source": "s", "params": {"features": FS_FEATURES, "precision_bits": 12},
            "privacy": NOISY, "cohort": {"min_clients": 10, "max_clients": 100}}
    q = client.submit(spec)
    assert q["status"] in ("pending", "running")
    client.cancel(q["id"])


# -- production policy ---------------------------------------------------------------------------------------

HIST = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
        "privacy": {"epsilon": 1.0, "delta": 1e-7, "mechanism": "skellam"}, "cohort": {"min_clients": 10, "max_clients": 100}}
TRIEHH = {"kind": "heavy_hitters", "source": "words", "params": {"mode": "triehh", "max_length": 5},
          "privacy": {"epsilon": 2.0, "delta": 1e-7, "mechanism": "none"}, "cohort": {"min_clients": 10, "max_clients": 100}}


@pytest.fixture(scope="module")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, AnalystClient, AnalystClient]]:
    tmp = tmp_path_factory.mktemp("spec-prod")
    srv = _server(tmp, {"FA_PROFILE": "production"})
    yield srv, AnalystClient(srv.url, srv.token("analyst")), AnalystClient(srv.url, srv.token("admin"))
    srv.stop()
    assert not srv.log_has_tracebacks(), (tmp / "server.log").read_text()[-5000:]


def test_production_refuses_sources_without_a_provisioned_budget(prod: tuple[Server, AnalystClient, AnalystClient]) -> None:
    _, analyst, admin = prod
    status, msg = _refused(analyst, {**HIST, "source": "never-seen"})
    assert status == 422 and msg.startswith("source:") and "PUT /v1/admin/budgets/never-seen" in msg
    admin.call("PUT", "/v1/admin/budgets/never-seen", {"epsilon": 5.0, "delta": 1e-5})
    q = analyst.submit({**HIST, "source": "never-seen"})
    assert q["source"] == "never-seen"
    analyst.cancel(q["id"])


def test_production_caps_delta(prod: tuple[Server, AnalystClient, AnalystClient]) -> None:
    _, analyst, admin = prod
    admin.call("PUT", "/v1/admin/budgets/words", {"epsilon": 10.0, "delta": 1e-3})
    status, msg = _refused(analyst, {**HIST, "privacy": {**HIST["privacy"], "delta": 1e-5}})
    assert status == 422 and msg.startswith("privacy.delta:") and "1e-06" in msg
    analyst.cancel(analyst.submit(HIST)["id"])  # δ = 1e-7 is within the cap


def test_production_needs_an_opt_in_for_server_trusted_kinds(prod: tuple[Server, AnalystClient, AnalystClient],
                                                              tmp_path: Path) -> None:
    _, analyst, admin = prod
    admin.call("PUT", "/v1/admin/budgets/words", {"epsilon": 10.0, "delta": 1e-3})
    status, msg = _refused(analyst, TRIEHH)
    assert status == 422 and msg.startswith("privacy.mechanism:")
    assert "not against this server" in msg and "FA_ALLOW_SERVER_TRUSTED_KINDS=true" in msg
    # With the operator's opt-in the same spec is admitted.
    srv = _server(tmp_path, {"FA_PROFILE": "production", "FA_ALLOW_SERVER_TRUSTED_KINDS": "true"})
    try:
        opted_in = AnalystClient(srv.url, srv.token("analyst"))
        AnalystClient(srv.url, srv.token("admin")).call("PUT", "/v1/admin/budgets/words", {"epsilon": 10.0, "delta": 1e-3})
        q = opted_in.submit(TRIEHH)
        assert q["kind"] == "heavy_hitters"
        opted_in.cancel(q["id"])
    finally:
        srv.stop()
    assert not srv.log_has_tracebacks()

