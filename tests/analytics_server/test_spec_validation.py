"""Kind-specific spec validation and the server's privacy policy at submit, against the app in process:
feature_stats bounds and names, TrieHH's privacy binding, noise plans the devices could not run, a profile that
requires noise and caps ε, and the production profile (provisioned budgets, maximum δ, an explicit opt-in for
kinds the server must be trusted with)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from analytics_server.state import STATE
from analyst_client.cli import AnalystClient, ApiError


async def _analyst(srv: TestServer, role: str = "analyst") -> AnalystClient:
    return AnalystClient(str(srv.make_url("")), await srv.app[STATE].store.tokens.create(role))


async def _refused(client: AnalystClient, spec: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as info:
        await asyncio.to_thread(client.submit, spec)
    assert info.value.status == 422, info.value
    return info.value.message


def _feature_stats(features: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "feature_stats", "source": "features",
            "params": {"features": features, "max_examples_per_device": 12, "min_count": 1},
            "privacy": {"mechanism": "none"}, "cohort": {"min_clients": 50, "max_clients": 50, "phase_timeout_s": 10}}


@pytest.mark.parametrize(
    ("features", "field"),
    [
        ([{"name": "a", "lower": 1.0, "upper": 1.0}], "lower"),
        ([{"name": "a", "lower": 2.0, "upper": 1.0}], "lower"),
        ([{"name": "a", "lower": "NaN", "upper": 1.0}], "lower"),
        ([{"name": "a", "lower": 0.0, "upper": "Infinity"}], "upper"),
        ([{"name": "a", "lower": 0, "upper": 1}, {"name": "a", "lower": 0, "upper": 2}], "duplicate"),
        ([], "features"),
    ],
)
async def test_feature_stats_bad_specs_are_422(app_server: TestServer, features: list[dict[str, Any]], field: str) -> None:
    msg = await _refused(await _analyst(app_server), _feature_stats(features))
    assert field in msg and "features" in msg, msg


async def test_a_misspelt_field_gets_the_nearest_allowed_name(app_server: TestServer) -> None:
    client = await _analyst(app_server)
    spec = {**_dp_histogram("skellam"), "privcy": {}}
    with pytest.raises(ApiError) as info:
        await asyncio.to_thread(client.submit, spec)
    assert info.value.status == 422
    assert "privcy: Extra inputs are not permitted; did you mean 'privacy'?" in info.value.message
    assert {"field": "privcy", "message": "Extra inputs are not permitted; did you mean 'privacy'?"} in info.value.detail
    params = {**_dp_histogram("skellam"), "params": {"bucket": ["moon"], "other_bucket": "other"}}
    msg = await _refused(client, params)
    assert "params.bucket: Extra inputs are not permitted; did you mean 'buckets'?" in msg, msg
    msg = await _refused(client, {**_dp_histogram("skellam"), "params": {"buckets": ["moon"], "qqqqqq": 1}})
    assert "params.qqqqqq: Extra inputs are not permitted" in msg and "did you mean" not in msg, msg


def _heavy_hitters(params: dict[str, Any], privacy: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "heavy_hitters", "source": "words",
            "params": {"max_length": 8, "alphabet": "abcdefghijklmnopqrstuvwxyz", "max_frontier": 32, **params},
            "privacy": privacy, "cohort": {"min_clients": 10, "max_clients": 500, "phase_timeout_s": 15}}


async def test_triehh_privacy_binding(app_server: TestServer) -> None:
    client = await _analyst(app_server)
    msg = await _refused(client, _heavy_hitters({"mode": "triehh"}, {"epsilon": 1.0, "delta": 1e-6, "mechanism": "skellam"}))
    assert "privacy.mechanism" in msg
    # epsilon/delta of the privacy block calibrate θ and the sampling rate: accepted, then cancelled
    spec = _heavy_hitters({"mode": "triehh"}, {"epsilon": 4.0, "delta": 1e-6, "mechanism": "none"})
    created = await asyncio.to_thread(client.submit, spec)
    assert (await asyncio.to_thread(client.cancel, created["id"]))["status"] == "cancelled"


def _dp_histogram(mechanism: str, epsilon: float = 1.0) -> dict[str, Any]:
    return {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"], "other_bucket": "other"},
            "privacy": {"mechanism": mechanism, "epsilon": epsilon, "delta": 1e-6},
            "cohort": {"min_clients": 1000, "max_clients": 1030, "phase_timeout_s": 20}}


async def test_policy_refuses_no_noise_and_large_epsilon(start_app_server: Callable[..., Awaitable[TestServer]]) -> None:
    srv = await start_app_server(budget_epsilon=1.5, budget_delta=1e-5, require_noise=True, max_epsilon_per_query=2.0)
    analyst = await _analyst(srv)
    msg = await _refused(analyst, {**_dp_histogram("skellam"), "privacy": {"mechanism": "none"}})
    assert msg.startswith("privacy.mechanism") and "requires differential privacy" in msg
    msg = await _refused(analyst, _dp_histogram("skellam", epsilon=3.0))
    assert msg.startswith("privacy.epsilon") and "maximum of 2" in msg
    # refusals charge nothing
    assert (await asyncio.to_thread(analyst.call, "GET", "/v1/budgets/words"))["spent_epsilon"] == 0.0


FS_FEATURES = [{"name": f"f{i}", "lower": 0.0, "upper": 1.0} for i in range(10)]
NOISY = {"epsilon": 1.0, "delta": 1e-6, "mechanism": "skellam"}
LOGISTIC = {"name": "logistic", "n_features": 3}


@pytest.mark.parametrize("spec, field", [
    # Skellam, 10 features, default max_examples_per_device, t_min 10, ε = 1: per-device μ 3.3e15 > 1e15.
    ({"kind": "feature_stats", "source": "s", "params": {"features": FS_FEATURES}, "privacy": NOISY,
      "cohort": {"min_clients": 10, "max_clients": 100}}, "params.precision_bits"),
    ({"kind": "training", "source": "examples", "params": {"rounds": 2, "model": LOGISTIC, "precision_bits": 30},
      "privacy": NOISY}, "params.precision_bits"),
    ({"kind": "training", "source": "examples", "params": {"rounds": 2, "model": LOGISTIC, "precision_bits": 34},
      "privacy": {**NOISY, "mechanism": "discrete_gaussian"}}, "params.precision_bits"),
    # No noise, but 100,000 contributions of up to 2^46 need more than a 62-bit ring.
    ({"kind": "feature_stats", "source": "s", "params": {"features": FS_FEATURES},
      "cohort": {"min_clients": 10, "max_clients": 100_000}}, "cohort.max_clients"),
    # A round that needs more contributors than a cohort may hold would never form.
    ({"kind": "training", "source": "examples", "params": {"rounds": 2, "model": LOGISTIC, "clients_per_round": 500},
      "cohort": {"max_clients": 100}}, "cohort.max_clients"),
])
async def test_noise_plans_the_devices_cannot_run_are_refused(app_server: TestServer, spec: dict[str, Any], field: str) -> None:
    msg = await _refused(await _analyst(app_server), spec)
    assert msg.startswith(field), msg


async def test_a_plan_within_the_samplers_limits_is_accepted(app_server: TestServer) -> None:
    client = await _analyst(app_server)
    spec = {"kind": "feature_stats", "source": "s", "params": {"features": FS_FEATURES, "precision_bits": 12},
            "privacy": NOISY, "cohort": {"min_clients": 10, "max_clients": 100}}
    q = await asyncio.to_thread(client.submit, spec)
    assert q["status"] in ("pending", "running")
    await asyncio.to_thread(client.cancel, q["id"])


# -- production profile ----------------------------------------------------------------------------------------

HIST = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun"]},
        "privacy": {"epsilon": 1.0, "delta": 1e-7, "mechanism": "skellam"}, "cohort": {"min_clients": 10, "max_clients": 100}}
TRIEHH = {"kind": "heavy_hitters", "source": "words", "params": {"mode": "triehh", "max_length": 5},
          "privacy": {"epsilon": 2.0, "delta": 1e-7, "mechanism": "none"}, "cohort": {"min_clients": 10, "max_clients": 100}}


async def _production(start: Callable[..., Awaitable[TestServer]], **settings: Any) -> tuple[AnalystClient, AnalystClient]:
    srv = await start(profile="production", **settings)
    return await _analyst(srv), await _analyst(srv, "admin")


async def test_production_refuses_sources_without_a_provisioned_budget(
        start_app_server: Callable[..., Awaitable[TestServer]]) -> None:
    analyst, admin = await _production(start_app_server)
    msg = await _refused(analyst, {**HIST, "source": "never-seen"})
    assert msg.startswith("source:") and "PUT /v1/admin/budgets/never-seen" in msg
    await asyncio.to_thread(admin.call, "PUT", "/v1/admin/budgets/never-seen", {"epsilon": 5.0, "delta": 1e-5})
    q = await asyncio.to_thread(analyst.submit, {**HIST, "source": "never-seen"})
    assert q["source"] == "never-seen"
    await asyncio.to_thread(analyst.cancel, q["id"])


async def test_production_caps_delta(start_app_server: Callable[..., Awaitable[TestServer]]) -> None:
    analyst, admin = await _production(start_app_server)
    await asyncio.to_thread(admin.call, "PUT", "/v1/admin/budgets/words", {"epsilon": 10.0, "delta": 1e-3})
    msg = await _refused(analyst, {**HIST, "privacy": {**HIST["privacy"], "delta": 1e-5}})
    assert msg.startswith("privacy.delta:") and "1e-06" in msg
    q = await asyncio.to_thread(analyst.submit, HIST)  # δ = 1e-7 is within the cap
    await asyncio.to_thread(analyst.cancel, q["id"])


async def test_production_needs_an_opt_in_for_server_trusted_kinds(
        start_app_server: Callable[..., Awaitable[TestServer]]) -> None:
    analyst, admin = await _production(start_app_server)
    await asyncio.to_thread(admin.call, "PUT", "/v1/admin/budgets/words", {"epsilon": 10.0, "delta": 1e-3})
    msg = await _refused(analyst, TRIEHH)
    assert msg.startswith("privacy.mechanism:")
    assert "not against this server" in msg and "FA_ALLOW_SERVER_TRUSTED_KINDS=true" in msg
    # With the operator's opt-in the same spec is admitted.
    opted_in, opted_admin = await _production(start_app_server, allow_server_trusted_kinds=True)
    await asyncio.to_thread(opted_admin.call, "PUT", "/v1/admin/budgets/words", {"epsilon": 10.0, "delta": 1e-3})
    q = await asyncio.to_thread(opted_in.submit, TRIEHH)
    assert q["kind"] == "heavy_hitters"
    await asyncio.to_thread(opted_in.cancel, q["id"])
