"""Server DP wiring in process: encoding scale round trip, policy profiles, the per-source budget ledger
(atomic charging, refunds, admin totals) and the budget routes."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from analytics_server import privacy
from analytics_server.db.engine import make_engine
from analytics_server.db.store import Store
from analytics_server.services import budgets_service, cohorts_service, queries_service
from analytics_server.settings import Settings
from device_sdk.noise import add_noise
from queries import dp
from queries.envelope import NoiseBlock
from queries.registry import get_kind
from queries.spec import QuerySpec
from secagg.randomness import SeededRandom

KIND = get_kind("histogram")


def _spec(mechanism: str = "discrete_gaussian", epsilon: float = 1.0, t_min: int = 1000, source: str = "w") -> QuerySpec:
    privacy_block = {"mechanism": mechanism} if mechanism == "none" else {"mechanism": mechanism, "epsilon": epsilon, "delta": 1e-6}
    return QuerySpec.model_validate({
        "kind": "histogram", "source": source, "params": {"buckets": ["a", "b", "c"]},
        "privacy": privacy_block, "cohort": {"min_clients": t_min, "max_clients": 2000},
    })


def _round(spec: QuerySpec) -> tuple[dp.QueryCalibration, object, dp.PlannedNoise]:
    params = KIND.parse_params(spec.params)
    cal = privacy.check_and_calibrate(spec, KIND, params, "demo")
    plan = KIND.plan_round(params, KIND.initial_state(params), 0)
    noise = privacy.round_noise(cal, plan)
    assert cal is not None and plan is not None and noise is not None
    return cal, plan, noise


def test_encoding_scale_is_applied_end_to_end() -> None:
    spec = _spec("discrete_gaussian")
    cal, plan, noise = _round(spec)
    s = noise.scale
    assert s > 1  # DG at t_min = 1000 needs the amplification
    q = cal
    assert noise.noise.l1 == s * plan.l1_sensitivity and noise.noise.inflation <= 1.02
    assert dp.round_noise(q, plan.l1_sensitivity, plan.l2_sensitivity).inflation > 2  # without it: much more noise
    assert privacy.choose_bits(2000, plan, noise) == dp.choose_bits(2000, s, noise.noise, dim=plan.dim)
    block = NoiseBlock.model_validate(privacy.device_noise_block(noise))
    assert block.encoding_scale == s
    vec = np.array([1, 0, 1])
    total = sum(add_noise(vec, block, SeededRandom(b"device/%d" % i)) for i in range(1000))
    unscaled = privacy.unscale(noise, total)
    assert np.all(np.abs(unscaled - 1000 * vec) < privacy.noise_halfwidth(noise, 1000))
    assert privacy.unscale(noise, np.array([-s, -1, 0, s // 2 - 1, s // 2, 3 * s])).tolist() == [-1, 0, 0, 0, 1, 3]
    decoded = privacy.aggregate_noise(noise, 1000)
    assert decoded is not None and decoded.encoding_scale == s
    assert decoded.round_noise == noise.noise
    assert decoded.std == pytest.approx(noise.noise.std(1000) / s)
    assert privacy.aggregate_noise(None, 1000) is None


def test_policy_profiles_and_overrides() -> None:
    params = KIND.parse_params(_spec().params)
    prod = Settings(profile="production").privacy_policy()
    assert prod.require_noise and prod.max_epsilon == privacy.PRODUCTION_MAX_EPSILON
    demo = Settings().privacy_policy()
    assert not demo.require_noise and demo.max_epsilon is None
    assert privacy.check_and_calibrate(_spec("none"), KIND, params, "demo", demo) is None
    with pytest.raises(privacy.PrivacyPolicyError, match=r"^privacy\.mechanism"):
        privacy.check_and_calibrate(_spec("none"), KIND, params, "production", prod)
    capped = Settings(max_epsilon_per_query=0.5).privacy_policy()
    with pytest.raises(privacy.PrivacyPolicyError, match=r"^privacy\.epsilon: 1 exceeds .* 0.5"):
        privacy.check_and_calibrate(_spec(epsilon=1.0), KIND, params, "demo", capped)
    assert Settings(profile="production", require_noise=False).privacy_policy().require_noise is False


async def _create(store: Store, spec: QuerySpec, budget: dp.Budget) -> str:
    q = await queries_service.submit(store, "histogram", None, spec.source, {}, {}, 1, {}, None,
                                 cost=privacy.query_cost(spec), default_budget=budget)
    return q.id


async def test_concurrent_submits_cannot_both_pass(migrated_url: str) -> None:
    store = Store(make_engine(migrated_url))
    budget = dp.Budget(1.5, 1e-5)
    results = await asyncio.gather(*(_create(store, _spec(), budget) for _ in range(4)), return_exceptions=True)
    ok = [r for r in results if isinstance(r, str)]
    refused = [r for r in results if isinstance(r, dp.BudgetExceeded)]
    assert len(ok) == 1 and len(refused) == 3, results
    assert "epsilon=0.5" in str(refused[0]) and "remaining" in str(refused[0])
    state = await store.budgets.get("w", budget)
    assert (state.spent_epsilon, state.remaining_epsilon, state.queries_charged) == (1.0, 0.5, 1)
    assert len(await store.queries.newest()) == 1  # refused submits left no query behind
    # other sources are independent; queries without noise are free
    await _create(store, _spec(source="other"), budget)
    await _create(store, _spec("none"), budget)
    assert [b.source for b in await store.budgets.states(budget)] == ["other", "w"]
    await store.engine.dispose()


async def test_refund_only_before_any_cohort_finished(migrated_url: str) -> None:
    store = Store(make_engine(migrated_url))
    budget = dp.Budget(5.0, 1e-5)
    early = await _create(store, _spec(), budget)
    late = await _create(store, _spec(), budget)
    r = await store.rounds.create(late, 0, {}, None, 20, need=1, dim=3)
    await store.devices.register("d1", b"k" * 32)
    await cohorts_service.create_cohort(store, "c1", late, r.id, {}, "secagg", {"d1": 1})
    await store.cohorts.finish("c1", np.zeros(3, dtype=np.int64), [1], {})
    assert await queries_service.set_status(store, early, "cancelled")
    assert await queries_service.set_status(store, late, "cancelled")
    state = await store.budgets.get("w", budget)
    assert (state.spent_epsilon, state.queries_charged) == (1.0, 1)  # only `early` was refunded
    await budgets_service.set_budget(store, "w", 1.2, 1e-5)
    state = await store.budgets.get("w", budget)
    assert (state.total_epsilon, state.remaining_epsilon, state.configured) == (1.2, pytest.approx(0.2), True)
    with pytest.raises(dp.BudgetExceeded):
        await _create(store, _spec(), budget)
    await store.engine.dispose()


async def test_budget_routes(app_server: TestServer) -> None:
    app = app_server.app
    from analytics_server.state import STATE

    store = app[STATE].store
    analyst, admin = await store.tokens.create("analyst"), await store.tokens.create("admin")
    other = await store.tokens.create("analyst")  # two analysts: each stays under the active-query cap
    spec = _spec(t_min=10).model_dump(mode="json")
    async with ClientSession(str(app_server.make_url(""))) as http:
        def h(tok: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {tok}"}

        async with http.post("/v1/queries", json=spec, headers=h(analyst)) as resp:
            assert resp.status == 201
        for i in range(9):  # default total ε = 10: nine more fit, the eleventh does not
            async with http.post("/v1/queries", json=spec, headers=h(other if i % 2 else analyst)) as resp:
                assert resp.status == 201
        async with http.post("/v1/queries", json=spec, headers=h(analyst)) as resp:
            assert resp.status == 422
            assert "remaining" in (await resp.json())["error"]
        async with http.get("/v1/budgets/w", headers=h(analyst)) as resp:
            view = await resp.json()
            assert (view["spent_epsilon"], view["remaining_epsilon"]) == (10.0, 0.0)
        async with http.put("/v1/admin/budgets/w", json={"epsilon": 20, "delta": 1e-4}, headers=h(analyst)) as resp:
            assert resp.status == 403
        async with http.put("/v1/admin/budgets/w", json={"epsilon": -1, "delta": 1e-4}, headers=h(admin)) as resp:
            assert resp.status == 422 and "epsilon" in (await resp.json())["error"]
        async with http.put("/v1/admin/budgets/w", json={"epsilon": 20, "delta": 1e-4}, headers=h(admin)) as resp:
            assert resp.status == 200 and (await resp.json())["remaining_epsilon"] == 10.0
        async with http.get("/v1/budgets", headers=h(analyst)) as resp:
            body = await resp.json()
            assert body["default_epsilon"] == 10.0 and [b["source"] for b in body["budgets"]] == ["w"]
        async with http.get("/v1/openapi.json") as resp:
            assert "/v1/budgets/{source}" in (await resp.json())["paths"]


def test_kind_own_guarantee_is_charged() -> None:
    hh = get_kind("heavy_hitters")
    spec = QuerySpec.model_validate({"kind": "heavy_hitters", "source": "w", "params": {"mode": "triehh", "epsilon": 1.0,
                                     "delta": 1e-9, "population_size": 10**5}})
    params = hh.parse_params(spec.params)
    cost = privacy.query_cost(spec, hh, params)
    assert cost is not None and cost.epsilon == pytest.approx(1.0) and 0 < cost.delta <= 1e-9
    assert privacy.query_cost(_spec("none"), KIND, KIND.parse_params(_spec("none").params)) is None
