"""Kind-specific spec validation and the server's privacy policy at submit, against the app in process:
feature_stats bounds and names, TrieHH's privacy binding, a profile that requires noise and caps ε."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from analytics_server.state import STATE
from device_sdk.analyst_cli import AnalystClient, ApiError


async def _analyst(srv: TestServer) -> AnalystClient:
    return AnalystClient(str(srv.make_url("")), await srv.app[STATE].store.create_token("analyst"))


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
