"""`POST /v1/queries/preview` on the in-process app: the charge and the expected noise of every value, the same
4xx as submit, and nothing created or charged; `AnalystClient.preview`."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from analytics_server import privacy
from analytics_server.services import budgets_service
from analytics_server.state import STATE
from analyst_client.cli import AnalystClient
from queries.local_run import run_query
from queries.registry import get_kind
from queries.spec import QuerySpec
from secagg.randomness import SeededRandom

HIST = {"kind": "histogram", "source": "words", "params": {"buckets": ["moon", "sun", "a/b"]},
        "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
        "cohort": {"min_clients": 100, "max_clients": 400}}
STATS = {"kind": "feature_stats", "source": "features",
         "params": {"features": [{"name": "age", "lower": 18, "upper": 90}], "max_examples_per_device": 3, "bins": 2},
         "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6},
         "cohort": {"min_clients": 500, "max_clients": 1000}}


async def _post(app_server: TestServer, body: Any, token: str | None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http:
        r = await http.post(str(app_server.make_url("/v1/queries/preview")), json=body, headers=headers)
        return r.status, await r.json()


async def test_histogram_preview_is_the_noise_the_query_will_carry(app_server: TestServer) -> None:
    st = app_server.app[STATE]
    token = await st.store.tokens.create("analyst")
    status, body = await _post(app_server, HIST, token)
    assert status == 200, body
    assert body["kind"] == "histogram" and body["source"] == "words" and body["rounds"] == 1 and body["t_min"] == 100
    assert body["privacy"] == {"epsilon": 1.0, "delta": 1e-6, "mechanism": "skellam", "validation": "proofs"}
    assert body["budget"] == {"source": "words", "remaining_epsilon": 10.0, "remaining_delta": 1e-5, "fits": True}
    # the std the orchestrator's round noise gives at t_min contributors, per bucket (JSON Pointers, escaped)
    # the spec as submitted, with the validation the server settled on (proofs leave part of δ to truncation)
    spec = QuerySpec.model_validate({**HIST, "privacy": {**HIST["privacy"], "validation": body["privacy"]["validation"]}})
    kind = get_kind("histogram")
    params = kind.parse_params(spec.params)
    cal = privacy.check_and_calibrate(spec, kind, params, "demo")
    noise = privacy.round_noise(cal, kind.plan_round(params, kind.initial_state(params), 0))
    assert noise is not None
    std = noise.std_released(100)
    assert [v["path"] for v in body["values"]] == ["/counts/moon", "/counts/sun", "/counts/a~1b"]
    for v in body["values"]:
        assert v["std"] == pytest.approx(std) and v["ci95_halfwidth"] == pytest.approx(1.959963984540054 * std)
    assert any("suppressed" in w["message"] for w in body["warnings"])
    # nothing was created or charged
    assert await st.store.queries.newest() == []
    assert (await st.store.budgets.get("words", st.settings.default_budget())).spent_epsilon == 0


async def test_feature_stats_preview_states_its_assumptions(app_server: TestServer) -> None:
    token = await app_server.app[STATE].store.tokens.create("analyst")
    status, body = await _post(app_server, STATS, token)
    assert status == 200, body
    paths = {v["path"]: v for v in body["values"]}
    assert {"/features/age/count", "/features/age/mean", "/features/age/var", "/features/age/histogram/counts/0"} <= set(paths)
    assert "devices × 3 rows" in paths["/features/age/mean"]["note"] and body["rounds"] == 2


async def test_bad_spec_auth_and_budget_answers(app_server: TestServer) -> None:
    st = app_server.app[STATE]
    token = await st.store.tokens.create("analyst")
    assert (await _post(app_server, HIST, None))[0] == 401
    status, body = await _post(app_server, {**HIST, "params": {"buckets": []}}, token)
    assert status == 422 and "params.buckets" in body["error"]  # the same answer as submit
    async with aiohttp.ClientSession() as http:
        r = await http.post(str(app_server.make_url("/v1/queries")), json={**HIST, "params": {"buckets": []}},
                            headers={"Authorization": f"Bearer {token}"})
        assert r.status == 422 and (await r.json())["error"] == body["error"]
    status, body = await _post(app_server, {**HIST, "privacy": {"mechanism": "skellam", "epsilon": 1.0}}, token)
    assert status == 422 and "delta" in body["error"]
    await budgets_service.set_budget(st.store, "words", 0.5, 1e-5)
    status, body = await _post(app_server, HIST, token)
    assert status == 200 and body["budget"]["fits"] is False and body["budget"]["remaining_epsilon"] == 0.5
    assert "would be refused" in body["warnings"][0]["message"]


async def test_production_refuses_an_unprovisioned_source_like_submit(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server(profile="production")
    token = await server.app[STATE].store.tokens.create("analyst")
    status, body = await _post(server, HIST, token)
    assert status == 422 and body["error"].startswith("source:")


async def test_analyst_client_preview(app_server: TestServer) -> None:
    token = await app_server.app[STATE].store.tokens.create("analyst")
    client = AnalystClient(str(app_server.make_url("")), token)
    body = await asyncio.get_running_loop().run_in_executor(None, client.preview, {**HIST, "privacy": {"mechanism": "none"}})
    assert body["privacy"]["epsilon"] is None and body["t_min"] is None
    assert all(v["std"] == 0 for v in body["values"]) and "exact" in body["warnings"][0]["message"]


async def test_preview_ranges_cover_what_the_run_realizes(app_server: TestServer) -> None:
    """The preview's std is at min_clients; its `std_range` spans the cohort sizes the spec allows and what the data
    decides. A histogram's realized std for a full cohort of max_clients = 4·min_clients is within 20 % of the
    preview's std (shares sized for the cohort) and is the range's upper end; a feature mean realized over 400 devices
    holding 1–3 rows (in process, the server's noise) lies inside its range."""
    token = await app_server.app[STATE].store.tokens.create("analyst")
    status, body = await _post(app_server, HIST, token)
    assert status == 200, body
    spec = QuerySpec.model_validate({**HIST, "privacy": {**HIST["privacy"], "validation": body["privacy"]["validation"]}})
    kind = get_kind("histogram")
    params = kind.parse_params(spec.params)
    cal = privacy.check_and_calibrate(spec, kind, params, "demo")
    plan = kind.plan_round(params, kind.initial_state(params), 0)
    _, own = privacy.cohort_noise(spec, cal, plan, privacy.round_noise(cal, plan, spec), 400)
    assert own is not None
    realized = own.std_released(400)
    for v in body["values"]:
        assert realized / v["std"] <= 1.2 and v["std_range"] == pytest.approx([v["std"], realized])

    stats = {**STATS, "params": {"features": [{"name": "age", "lower": 18, "upper": 90}], "max_examples_per_device": 3},
             "privacy": {**STATS["privacy"], "validation": "none"}, "cohort": {"min_clients": 100, "max_clients": 400}}
    status, body = await _post(app_server, stats, token)
    assert status == 200, body
    mean = next(v for v in body["values"] if v["path"] == "/features/age/mean")
    rng = np.random.default_rng(5)
    devices = [[{"age": float(np.clip(rng.normal(40, 12), 18, 90))} for _ in range(int(rng.integers(1, 4)))]
               for _ in range(400)]
    run = run_query(get_kind("feature_stats"), stats["params"], devices, privacy=stats["privacy"], t_min=100,
                    rng=np.random.default_rng(6), noise_source=SeededRandom(b"preview-range"))
    got = run.release.noise_std["/features/age/mean"]
    lo, hi = mean["std_range"]
    assert lo <= got <= hi and hi > 2 * lo, (lo, got, hi)
