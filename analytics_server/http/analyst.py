"""Analyst API (design.md §3): submit, list, status, result, cancel, events (SSE); plus admin routes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from analytics_server.api_models import (
    BudgetList,
    BudgetRequest,
    BudgetView,
    Contributors,
    Progress,
    QueryList,
    QueryView,
    ResultView,
    TokenCreated,
    TokenRequest,
)
from analytics_server.auth import require_token
from analytics_server.db.models import Query
from analytics_server.db.store import TERMINAL
from analytics_server.errors import HttpError
from analytics_server.http.common import parse_json_body, parse_model, read_body
from analytics_server.spec_check import check_spec_off_loop
from analytics_server.state import STATE, AppState
from queries import dp
from secagg.phases import Phase

ANALYST = ("analyst", "admin")
ADMIN = ("admin",)
routes = web.RouteTableDef()


def _state(request: web.Request) -> AppState:
    return request.app[STATE]


async def _query_or_404(st: AppState, query_id: str) -> Query:
    if len(query_id) > 64:
        raise HttpError(404, "unknown query id")
    q = await st.store.get_query(query_id)
    if q is None:
        raise HttpError(404, f"unknown query id {query_id!r}")
    return q


async def _view(st: AppState, q: Query) -> QueryView:
    live = st.orchestrator.live.get(q.id, {})
    cohorts: dict[str, int] = {}
    contributors, need, index = 0, None, q.current_round
    rnd = await st.store.get_round(q.id, index)
    if rnd is None and index > 0:  # between rounds or finished: show the last round
        index -= 1
        rnd = await st.store.get_round(q.id, index)
    if rnd is not None:
        contributors, need = rnd.contributors, rnd.need
        for c in await st.store.cohorts_of_round(rnd.id):
            cohorts[c.status] = cohorts.get(c.status, 0) + 1
    progress = Progress(
        round=index,
        rounds_upper_bound=q.rounds_upper_bound,
        rounds_done=q.current_round,
        contributors=contributors,
        need=need,
        cohorts=cohorts,
        phase=_live_phase(st, live),
        devices_eligible=live.get("devices_eligible"),
    )
    return QueryView(
        id=q.id,
        kind=q.kind,
        name=q.name,
        source=q.source,
        status=q.status,  # type: ignore[arg-type]
        progress=progress,
        error=q.error,
        created_at=q.created_at.isoformat(),
        finished_at=q.finished_at.isoformat() if q.finished_at else None,
    )


def _live_phase(st: AppState, live: dict[str, Any]) -> str | None:
    cohort = st.orchestrator.cohorts.get(live.get("cohort") or "")
    if cohort is not None and cohort.status == "running":
        return Phase(cohort.phase).label
    return live.get("phase")


def _json(model: Any, status: int = 200) -> web.Response:
    return web.json_response(model.model_dump(mode="json"), status=status)


@routes.post("/v1/queries")
async def submit(request: web.Request) -> web.Response:
    st = _state(request)
    token = await require_token(request, st.store, ANALYST)
    raw = parse_json_body(request, await read_body(request, st.settings.json_body_limit))
    checked = await check_spec_off_loop(raw, st.settings)  # parse + calibrate + noise plan, in a thread, time-limited
    spec = checked.spec
    if st.settings.budget_must_be_provisioned() and not (await st.store.get_budget(spec.source, st.settings.default_budget())).configured:
        msg = (f"source: no privacy budget is provisioned for source {spec.source!r}; this server refuses sources "
               f"without one (an admin sets it with PUT /v1/admin/budgets/{spec.source})")
        raise HttpError(422, msg, [{"field": "source", "message": msg}])
    try:
        q = await st.store.create_query(
            kind=spec.kind,
            name=spec.name,
            source=spec.source,
            spec=spec.model_dump(mode="json"),
            state=checked.state,
            rounds_upper_bound=checked.rounds_upper_bound,
            calibration=checked.calibration,
            created_by=token.id,
            cost=checked.cost,
            default_budget=st.settings.default_budget(),
        )
    except dp.BudgetExceeded as exc:
        raise HttpError(422, f"source {spec.source!r}: {exc}") from None
    st.orchestrator.spawn(q.id)
    return _json(await _view(st, q), 201)


@routes.get("/v1/queries")
async def list_queries(request: web.Request) -> web.Response:
    st = _state(request)
    await require_token(request, st.store, ANALYST)
    views = [await _view(st, q) for q in await st.store.list_queries()]
    return _json(QueryList(queries=views))


@routes.get("/v1/queries/{id}")
async def get_query(request: web.Request) -> web.Response:
    st = _state(request)
    await require_token(request, st.store, ANALYST)
    q = await _query_or_404(st, request.match_info["id"])
    return _json(await _view(st, q))


@routes.get("/v1/queries/{id}/result")
async def get_result(request: web.Request) -> web.Response:
    st = _state(request)
    await require_token(request, st.store, ANALYST)
    q = await _query_or_404(st, request.match_info["id"])
    if q.status != "succeeded" or q.result is None:
        detail = f": {q.error}" if q.error else ""
        raise HttpError(409, f"query {q.id} has no result: status is {q.status}{detail}")
    return _json(ResultView(id=q.id, kind=q.kind, result=q.result, privacy=q.privacy or {}))


@routes.post("/v1/queries/{id}/cancel")
async def cancel(request: web.Request) -> web.Response:
    st = _state(request)
    await require_token(request, st.store, ANALYST)
    q = await _query_or_404(st, request.match_info["id"])
    if q.status in TERMINAL:
        raise HttpError(409, f"query {q.id} is already {q.status}")
    if not await st.orchestrator.cancel(q.id):
        fresh = await _query_or_404(st, q.id)
        raise HttpError(409, f"query {q.id} is already {fresh.status}")
    return _json(await _view(st, await _query_or_404(st, q.id)))


@routes.get("/v1/queries/{id}/events")
async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: `progress` whenever the status view changes, `end` when the query is terminal."""
    st = _state(request)
    await require_token(request, st.store, ANALYST)
    q = await _query_or_404(st, request.match_info["id"])
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    last = None
    while True:
        q = await _query_or_404(st, q.id)
        view = (await _view(st, q)).model_dump(mode="json")
        text = json.dumps(view, sort_keys=True)
        if text != last:
            await resp.write(f"event: progress\ndata: {text}\n\n".encode())
            last = text
        if q.status in TERMINAL:
            await resp.write(f"event: end\ndata: {json.dumps({'status': q.status})}\n\n".encode())
            break
        await asyncio.sleep(0.5)
    await resp.write_eof()
    return resp


@routes.post("/v1/admin/tokens")
async def create_token(request: web.Request) -> web.Response:
    st = _state(request)
    await require_token(request, st.store, ADMIN)
    body = parse_model(TokenRequest, parse_json_body(request, await read_body(request, st.settings.json_body_limit)))
    token = await st.store.create_token(body.role, body.label)
    return _json(TokenCreated(token=token, role=body.role), 201)


@routes.get("/v1/admin/queries/{id}/contributors")
async def contributors(request: web.Request) -> web.Response:
    """Which devices' inputs are inside each round's sum (admin only: it reveals participation)."""
    st = _state(request)
    await require_token(request, st.store, ADMIN)
    q = await _query_or_404(st, request.match_info["id"])
    rounds = await st.store.contributors(q.id)
    return _json(Contributors(query_id=q.id, rounds={str(k): v for k, v in rounds.items()}))


@routes.get("/v1/budgets")
async def list_budgets(request: web.Request) -> web.Response:
    """Every source with a set total or a charged query; other sources have the default total."""
    st = _state(request)
    await require_token(request, st.store, ANALYST)
    default = st.settings.default_budget()
    views = [BudgetView(**b.to_dict()) for b in await st.store.list_budgets(default)]
    return _json(BudgetList(budgets=views, default_epsilon=default.total_epsilon, default_delta=default.total_delta))


def _source(request: web.Request) -> str:
    source = request.match_info["source"]
    if not source or len(source) > 128:
        raise HttpError(404, "source: must be 1 to 128 characters")
    return source


@routes.get("/v1/budgets/{source}")
async def get_budget(request: web.Request) -> web.Response:
    st = _state(request)
    await require_token(request, st.store, ANALYST)
    budget = await st.store.get_budget(_source(request), st.settings.default_budget())
    return _json(BudgetView(**budget.to_dict()))


@routes.put("/v1/admin/budgets/{source}")
async def set_budget(request: web.Request) -> web.Response:
    """Set a source's total (ε, δ) (admin). Spent charges stay; a total below them leaves nothing to spend."""
    st = _state(request)
    await require_token(request, st.store, ADMIN)
    source = _source(request)
    body = parse_model(BudgetRequest, parse_json_body(request, await read_body(request, st.settings.json_body_limit)))
    await st.store.set_budget(source, body.epsilon, body.delta)
    budget = await st.store.get_budget(source, st.settings.default_budget())
    return _json(BudgetView(**budget.to_dict()))
