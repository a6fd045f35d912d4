"""Analyst API (docs/server.md): submit, list, status, result, cancel, events (SSE); plus budget and admin routes.

Lists are paged by keyset (docs/server.md, "Paging"): `?limit=N` rows per page and `?after=CURSOR`, the `next`
of the page before; the last page has no `next`. A cursor is opaque to clients (base64url of the list's name and
the last row's key); one of another list, or not a cursor at all, is a 400 naming `after`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

from aiohttp import web

from analytics_server.api_models import (
    BUDGET_PAGE,
    CHARGE_PAGE,
    QUERY_PAGE,
    QUERY_PAGE_MAX,
    AbortReason,
    BudgetList,
    BudgetRequest,
    BudgetView,
    ChargeList,
    ChargeView,
    ClusterView,
    CohortProgress,
    Contributors,
    FleetView,
    PhaseStatsView,
    PreviewView,
    ProcessInfo,
    Progress,
    QueryList,
    QueryView,
    QuotaRequest,
    QuotaView,
    ResultView,
    TemplateList,
    TemplateView,
    TokenCreated,
    TokenRequest,
    WhoAmI,
)
from analytics_server.auth import require_token
from analytics_server.db.models import Query
from analytics_server.db.reports import ViewRound
from analytics_server.db.store import TERMINAL, TokenInfo
from fa_common.http_errors import HttpError
from analytics_server.http.common import app_state, json_model, parse_json_body, parse_model, read_body
from analytics_server.logs import FIELDS, fields
from analytics_server.spec_check import check_spec_off_loop
from analytics_server.services import budgets_service, queries_service
from analytics_server.state import AppState
from queries import dp
from queries.kind import QueryKindError
from queries.registry import get_kind
from queries.table import flatten, tables_to_json
from queries.templates import TEMPLATES
from secagg.phases import Phase

log = logging.getLogger(__name__)
ANALYST = ("analyst", "admin")
ADMIN = ("admin",)
SSE_POLL_S = 0.5
"""How often the event stream looks for new stored events and a changed status view."""
MAX_CURSOR = 600
"""Longest `?after=` read (a cursor holds a list name and one row's key)."""
MAX_KEY = 1 << 62
"""Integer keys in a cursor (charge ids, microseconds since the epoch up to year 9999) are below this."""
routes = web.RouteTableDef()
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# -- paging -------------------------------------------------------------------------------------------


def _limit(request: web.Request, default: int, most: int) -> int:
    text = request.query.get("limit")
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or not 1 <= int(text) <= most:
        raise HttpError(400, f"limit: must be an integer in 1..{most}, got {text[:20]!r}",
                        [{"field": "limit", "message": f"must be an integer in 1..{most}"}])
    return int(text)


def _cursor(name: str, *key: str | int) -> str:
    """The opaque cursor of a page ending at `key` in list `name`."""
    raw = json.dumps([name, *key], separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _after(request: web.Request, name: str, types: tuple[type, ...]) -> list[Any] | None:
    """The key in `?after=`, checked to be a cursor of list `name` with values of `types`; None without one."""
    text = request.query.get("after")
    if not text:
        return None
    msg = f"after: not a cursor of this list (pass the `next` of the page before), got {text[:40]!r}"
    bad = HttpError(400, msg, [{"field": "after", "message": "not a cursor of this list"}])
    if len(text) > MAX_CURSOR or not text.isascii():
        raise bad
    try:
        value = json.loads(base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True))
    except (binascii.Error, ValueError):
        raise bad from None
    if not (isinstance(value, list) and len(value) == 1 + len(types) and value[0] == name
            and all(_key_ok(v, t) for v, t in zip(value[1:], types))):
        raise bad
    return value[1:]


def _key_ok(value: object, typ: type) -> bool:
    if isinstance(value, bool) or not isinstance(value, typ):
        return False
    return not isinstance(value, int) or 0 <= value < MAX_KEY


def _bool(request: web.Request, name: str) -> bool:
    text = request.query.get(name, "").lower()
    if text not in ("", "0", "1", "false", "true"):
        raise HttpError(400, f"{name}: must be true or false, got {text[:20]!r}",
                        [{"field": name, "message": "must be true or false"}])
    return text in ("1", "true")


def _micros(at: datetime) -> int:
    """Microseconds since the epoch of a stored time (SQLite gives it back without a zone: it is UTC)."""
    at = at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)
    delta = at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


async def _query_or_404(st: AppState, query_id: str, token: TokenInfo) -> Query:
    """The query, if `token` may see it: its own queries for an analyst, every query for an admin. Another
    analyst's query is "unknown" (404, the same answer as for an id that does not exist)."""
    if len(query_id) > 64:
        raise HttpError(404, "unknown query id")
    q = await st.store.queries.get(query_id)
    if q is None or not _may_see(token, q):
        raise HttpError(404, f"unknown query id {query_id!r}")
    return q


def _may_see(token: TokenInfo, q: Query) -> bool:
    return token.role == "admin" or (q.created_by is not None and q.created_by == token.id)


def _limits(st: AppState) -> dp.AnalystLimits:
    s = st.settings
    return dp.AnalystLimits(s.analyst_quota(), s.analyst_quota_window_s, s.max_active_queries_per_analyst)


async def _view(st: AppState, q: Query, with_spec: bool = False) -> QueryView:
    return _view_of(st, q, (await st.store.reports.view_rounds([q]))[q.id], with_spec)


def _view_of(st: AppState, q: Query, rnd: ViewRound | None, with_spec: bool = False) -> QueryView:
    """The status view of `q`, whose current round (else the one before: between rounds or finished) is `rnd`."""
    live = st.orchestrator.live.get(q.id) or q.progress or {}  # this process's, else the owner's last stored
    index = rnd.index if rnd is not None else max(0, q.current_round - 1)
    terminal = q.status in TERMINAL
    progress = Progress(
        round=index,
        rounds_upper_bound=q.rounds_upper_bound,
        rounds_done=q.current_round,
        contributors=rnd.contributors if rnd is not None else 0,
        need=rnd.need if rnd is not None else None,
        cohorts=dict(rnd.cohorts) if rnd is not None else {},
        phase=None if terminal else _live_phase(st, live),
        devices_eligible=live.get("devices_eligible"),
        cohort=None if terminal else _live_cohort(st, live),
    )
    return QueryView(
        id=q.id,
        kind=q.kind,
        name=q.name,
        source=q.source,
        status=q.status,
        progress=progress,
        error=q.error,
        created_at=q.created_at.isoformat(),
        finished_at=q.finished_at.isoformat() if q.finished_at else None,
        created_by=q.created_by,
        spec=q.spec if with_spec else None,
    )


def _live_cohort(st: AppState, live: dict[str, Any]) -> CohortProgress | None:
    """The running cohort: this process's runtime, else the owner's snapshot stored at its last heartbeat."""
    runtime = st.orchestrator.cohorts.get(live.get("cohort") or "")
    snap = runtime.snapshot() if runtime is not None and runtime.status == "running" else live.get("cohort_live")
    if not snap or snap.get("phase") in ("done", "aborted"):  # ending: its outcome is in `cohorts`
        return None
    return CohortProgress(**snap, deadline_in_s=max(0.0, float(snap["deadline_at"]) - st.store.clock.time()))


def _live_phase(st: AppState, live: dict[str, Any]) -> str | None:
    cohort = st.orchestrator.cohorts.get(live.get("cohort") or "")
    if cohort is not None and cohort.status == "running":
        return Phase(cohort.phase).label
    return live.get("phase")


async def _check_provisioned(st: AppState, source: str) -> None:
    """422 when the server requires an admin-set budget and `source` has none."""
    if st.settings.budget_must_be_provisioned() and not (await st.store.budgets.get(source, st.settings.default_budget())).configured:
        msg = (f"source: no privacy budget is provisioned for source {source!r}; this server refuses sources "
               f"without one (an admin sets it with PUT /v1/admin/budgets/{source})")
        raise HttpError(422, msg, [{"field": "source", "message": msg}])


@routes.post("/v1/queries/preview")
async def preview(request: web.Request) -> web.Response:
    """What a query would charge and the expected noise of each value it would release (docs/server.md,
    "Preview"); the same checks and 4xx as submit, and nothing is created or charged."""
    st = app_state(request)
    token = await require_token(request, st.store, ANALYST)
    raw = parse_json_body(request, await read_body(request, st.settings.json_body_limit))
    checked = await check_spec_off_loop(raw, st.settings, with_preview=True)
    spec = checked.spec
    await _check_provisioned(st, spec.source)
    assert checked.preview is not None
    budget = await st.store.budgets.get(spec.source, st.settings.default_budget())
    cost = checked.cost
    tol = 1 + 1e-9
    fits = cost is None or (cost.epsilon <= budget.remaining_epsilon * tol and cost.delta <= budget.remaining_delta * tol)
    warnings = list(checked.preview.warnings)
    if not fits:
        assert cost is not None
        warnings.insert(0, {"message": f"source {spec.source!r} has ε={budget.remaining_epsilon:g}, δ={budget.remaining_delta:g} "
                                       f"left; this query charges ε={cost.epsilon:g}, δ={cost.delta:g} and would be refused"})
    usage = await queries_service.usage(st.store, token.id, _limits(st))
    if cost is not None and usage.epsilon_remaining is not None and cost.epsilon > usage.epsilon_remaining * tol:
        warnings.insert(0, {"message": f"your ε quota has {usage.epsilon_remaining:g} left; this query charges "
                                       f"ε={cost.epsilon:g} and would be refused"})
    if usage.max_active_queries is not None and usage.active_queries >= usage.max_active_queries:
        warnings.insert(0, {"message": f"you have {usage.active_queries} active queries, the most allowed: a submit "
                                       "now would be refused (429)"})
    block: dict[str, Any] = {"epsilon": None if cost is None else cost.epsilon, "delta": None if cost is None else cost.delta,
                             "mechanism": spec.privacy.mechanism}
    validation = getattr(spec.privacy, "validation", None)
    if validation is not None:
        block["validation"] = validation
    body = {
        "kind": spec.kind,
        "source": spec.source,
        "privacy": block,
        "rounds": checked.rounds_upper_bound,
        "t_min": checked.preview.t_min,
        "budget": {"source": spec.source, "remaining_epsilon": budget.remaining_epsilon,
                   "remaining_delta": budget.remaining_delta, "fits": fits},
        "values": checked.preview.values,
        "warnings": warnings,
    }
    return json_model(PreviewView.model_validate(body))


@routes.post("/v1/queries")
async def submit(request: web.Request) -> web.Response:
    st = app_state(request)
    token = await require_token(request, st.store, ANALYST)
    raw = parse_json_body(request, await read_body(request, st.settings.json_body_limit))
    checked = await check_spec_off_loop(raw, st.settings)  # parse + calibrate + noise plan, in a thread, time-limited
    spec = checked.spec
    await _check_provisioned(st, spec.source)
    try:
        q = await queries_service.submit(
            st.store,
            kind=spec.kind,
            name=spec.name,
            source=spec.source,
            spec=spec.model_dump(mode="json"),
            state=checked.state,
            rounds_upper_bound=checked.rounds_upper_bound,
            calibration=None if checked.calibration is None else checked.calibration.to_dict(),
            created_by=token.id,
            cost=checked.cost,
            default_budget=st.settings.default_budget(),
            limits=_limits(st),
        )
    except dp.BudgetExceeded as exc:
        raise HttpError(422, f"source {spec.source!r}: {exc}") from None
    except dp.ActiveQueryLimit as exc:
        raise HttpError(429, str(exc)) from None
    except dp.AnalystQuotaExceeded as exc:
        raise HttpError(422, str(exc)) from None
    await _log_submitted(st, q, token, checked.cost)
    st.orchestrator.spawn(q.id)
    return json_model(await _view(st, q), 201)


async def _log_submitted(st: AppState, q: Query, token: TokenInfo, cost: dp.PrivacyCost | None) -> None:
    info = fields(event="query.submitted", query_id=q.id, kind=q.kind, source=q.source, token_id=token.id)
    if cost is None:
        log.info("query %s submitted: %s over source %r by token %d (no noise: nothing charged)",
                 q.id, q.kind, q.source, token.id, extra=info)
        return
    left = await st.store.budgets.get(q.source, st.settings.default_budget())
    info[FIELDS] |= {"epsilon": cost.epsilon, "delta": cost.delta, "remaining_epsilon": left.remaining_epsilon,
                     "remaining_delta": left.remaining_delta}
    log.info("query %s submitted: %s over source %r by token %d; charged epsilon=%g delta=%g to %r "
             "(remaining epsilon=%g delta=%g)", q.id, q.kind, q.source, token.id, cost.epsilon, cost.delta,
             q.source, left.remaining_epsilon, left.remaining_delta, extra=info)


@routes.get("/v1/queries")
async def list_queries(request: web.Request) -> web.Response:
    """The caller's queries (an admin: all), newest first, a page at a time: `?limit=` (default 200, at most
    500), `?after=` the `next` of the page before, `?spec=true` to include each query's spec."""
    st = app_state(request)
    token = await require_token(request, st.store, ANALYST)
    limit = _limit(request, QUERY_PAGE, QUERY_PAGE_MAX)
    key = _after(request, "queries", (int, str))
    with_spec = _bool(request, "spec")
    owner = None if token.role == "admin" else token.id
    after = None
    if key is not None:
        try:
            after = (_EPOCH + timedelta(microseconds=key[0]), key[1])
        except OverflowError:  # past year 9999: no query's time
            raise HttpError(400, "after: not a cursor of this list (its time is out of range)",
                            [{"field": "after", "message": "out of range"}]) from None
    page = await st.store.reports.query_page(owner, limit, after)
    rounds = await st.store.reports.view_rounds(page.rows)
    views = [_view_of(st, q, rounds[q.id], with_spec) for q in page.rows]
    last = page.rows[-1] if page.rows else None
    nxt = _cursor("queries", _micros(last.created_at), last.id) if page.more and last is not None else None
    return json_model(QueryList(queries=views, next=nxt))


@routes.get("/v1/queries/{id}")
async def get_query(request: web.Request) -> web.Response:
    st = app_state(request)
    token = await require_token(request, st.store, ANALYST)
    q = await _query_or_404(st, request.match_info["id"], token)
    return json_model(await _view(st, q, with_spec=True))


@routes.get("/v1/queries/{id}/result")
async def get_result(request: web.Request) -> web.Response:
    st = app_state(request)
    token = await require_token(request, st.store, ANALYST)
    q = await _query_or_404(st, request.match_info["id"], token)
    if q.status not in ("succeeded", "failed") or q.result is None:
        detail = f": {q.error}" if q.error else ""
        raise HttpError(409, f"query {q.id} has no result: status is {q.status}{detail}")
    return json_model(ResultView(
        id=q.id, kind=q.kind, status=q.status, error=q.error, result=q.result,
        privacy=q.privacy or {}, uncertainty=q.uncertainty or {}, warnings=q.warnings or [],
        table=_table(q.kind, q.result),
    ))


def _table(kind: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    """The result as its kind's display tables (JSON); a kind the server no longer knows: the generic flattening."""
    try:
        tables = get_kind(kind).tabulate(result)
    except QueryKindError:
        tables = [flatten(result)]
    return tables_to_json(tables)


@routes.post("/v1/queries/{id}/cancel")
async def cancel(request: web.Request) -> web.Response:
    st = app_state(request)
    token = await require_token(request, st.store, ANALYST)
    q = await _query_or_404(st, request.match_info["id"], token)
    if q.status in TERMINAL:
        raise HttpError(409, f"query {q.id} is already {q.status}")
    if not await st.orchestrator.cancel(q.id):
        fresh = await _query_or_404(st, q.id, token)
        raise HttpError(409, f"query {q.id} is already {fresh.status}")
    return json_model(await _view(st, await _query_or_404(st, q.id, token)))


@routes.get("/v1/queries/{id}/events")
async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: the query's stored history and its live status.

    Each row of the `events` table for the query (`query.submitted`, `round.started`, `cohort.formed`,
    `cohort.phase`, `cohort.finished`, …) is sent once, in order, as `event: <type>` with `id: <row id>`, so a
    client that reconnects with `Last-Event-ID` gets only what it missed; `progress` (the status view) is sent
    whenever it changes; `end` once the query is terminal and every stored event has been sent."""
    st = app_state(request)
    token = await require_token(request, st.store, ANALYST)
    q = await _query_or_404(st, request.match_info["id"], token)
    after = _last_event_id(request)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    try:
        await _stream(st, q, token, after, resp)
    except ConnectionResetError:  # the client went away (a page left, a stream aborted): nothing to answer
        log.debug("event stream of query %s: the client closed the connection", q.id)
    return resp


async def _stream(st: AppState, q: Query, token: TokenInfo, after: int, resp: web.StreamResponse) -> None:
    last = None
    while True:
        q = await _query_or_404(st, q.id, token)
        view = (await _view(st, q)).model_dump(mode="json")
        text = json.dumps(view, sort_keys=True)
        if text != last:
            await resp.write(_sse("progress", text))
            last = text
        while batch := await st.store.events.of_query(q.id, after):  # read after the query row: includes its last event
            for ev in batch:
                data = {"type": ev.type, "at": ev.created_at.isoformat(), "cohort_id": ev.cohort_id, "data": ev.data}
                await resp.write(_sse(ev.type, json.dumps(data), ev.id))
                after = ev.id
        if q.status in TERMINAL:
            await resp.write(_sse("end", json.dumps({"status": q.status})))
            break
        await asyncio.sleep(SSE_POLL_S)
    await resp.write_eof()


def _last_event_id(request: web.Request) -> int:
    text = request.headers.get("Last-Event-ID", "").strip() or "0"
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise HttpError(400, f"Last-Event-ID: must be the id of an event of this stream, got {text[:20]!r}")
    return int(text)


def _sse(event: str, data: str, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {data}\n\n".encode()


@routes.post("/v1/admin/tokens")
async def create_token(request: web.Request) -> web.Response:
    st = app_state(request)
    await require_token(request, st.store, ADMIN)
    body = parse_model(TokenRequest, parse_json_body(request, await read_body(request, st.settings.json_body_limit)))
    token = await st.store.tokens.create(body.role, body.label)
    info = await st.store.tokens.lookup(token)
    return json_model(TokenCreated(token=token, role=body.role, id=info.id if info else None), 201)


@routes.get("/v1/quota")
async def get_quota(request: web.Request) -> web.Response:
    """The calling token's ε quota (used within the window, remaining) and its active queries."""
    st = app_state(request)
    token = await require_token(request, st.store, ANALYST)
    return json_model(QuotaView(**(await queries_service.usage(st.store, token.id, _limits(st))).to_dict()))


def _token_id(request: web.Request) -> int:
    raw = request.match_info["token_id"]
    if not raw.isdigit() or len(raw) > 18:
        raise HttpError(404, "token id: must be a decimal integer")
    return int(raw)


@routes.put("/v1/admin/tokens/{token_id}/quota")
async def set_quota(request: web.Request) -> web.Response:
    """Set a token's own ε quota (admin); `{"epsilon": null}` returns it to the server default."""
    st = app_state(request)
    await require_token(request, st.store, ADMIN)
    token_id = _token_id(request)
    body = parse_model(QuotaRequest, parse_json_body(request, await read_body(request, st.settings.json_body_limit)))
    if not await st.store.tokens.set_quota(token_id, body.epsilon):
        raise HttpError(404, f"unknown token id {token_id}")
    return json_model(QuotaView(**(await queries_service.usage(st.store, token_id, _limits(st))).to_dict()))


@routes.get("/v1/admin/queries/{id}/contributors")
async def contributors(request: web.Request) -> web.Response:
    """Which devices' inputs are inside each round's sum (admin only: it reveals participation)."""
    st = app_state(request)
    token = await require_token(request, st.store, ADMIN)
    q = await _query_or_404(st, request.match_info["id"], token)
    rounds = await st.store.rounds.contributors(q.id)
    return json_model(Contributors(query_id=q.id, rounds={str(k): v for k, v in rounds.items()},
                                   excluded=await st.store.queries.excluded_devices(q.id)))


@routes.get("/v1/cluster")
async def cluster(request: web.Request) -> web.Response:
    """The server processes sharing this database: live ones first, their leases and load (admin only)."""
    st = app_state(request)
    await require_token(request, st.store, ADMIN)
    procs = await st.store.cluster.list_processes(st.settings.lease_ttl_s)
    return json_model(ClusterView(processes=[
        ProcessInfo(id=p.id, name=p.name, pid=p.pid, url=p.url, host=p.host, started_at=p.started_at,
                    heartbeat_at=p.heartbeat_at, live=p.live, leases=p.leases, load=p.load)
        for p in procs
    ]))


@routes.get("/v1/budgets")
async def list_budgets(request: web.Request) -> web.Response:
    """Every source with a set total or a charged query, by name, a page at a time (`?limit=`, default and at most
    1,000; `?after=`); other sources have the default total."""
    st = app_state(request)
    await require_token(request, st.store, ANALYST)
    limit = _limit(request, BUDGET_PAGE, BUDGET_PAGE)
    key = _after(request, "budgets", (str,))
    default = st.settings.default_budget()
    page = await st.store.reports.budget_source_page(limit, None if key is None else key[0])
    views = [BudgetView(**(await st.store.budgets.get(name, default)).to_dict()) for name in page.rows]
    nxt = _cursor("budgets", page.rows[-1]) if page.more and page.rows else None
    return json_model(BudgetList(budgets=views, default_epsilon=default.total_epsilon, default_delta=default.total_delta,
                                 next=nxt))


def _source(request: web.Request) -> str:
    source = request.match_info["source"]
    if not source or len(source) > 128:
        raise HttpError(404, "source: must be 1 to 128 characters")
    return source


@routes.get("/v1/budgets/{source}")
async def get_budget(request: web.Request) -> web.Response:
    st = app_state(request)
    await require_token(request, st.store, ANALYST)
    budget = await st.store.budgets.get(_source(request), st.settings.default_budget())
    return json_model(BudgetView(**budget.to_dict()))


@routes.put("/v1/admin/budgets/{source}")
async def set_budget(request: web.Request) -> web.Response:
    """Set a source's total (ε, δ) (admin). Spent charges stay; a total below them leaves nothing to spend."""
    st = app_state(request)
    await require_token(request, st.store, ADMIN)
    source = _source(request)
    body = parse_model(BudgetRequest, parse_json_body(request, await read_body(request, st.settings.json_body_limit)))
    await budgets_service.set_budget(st.store, source, body.epsilon, body.delta)
    budget = await st.store.budgets.get(source, st.settings.default_budget())
    log.info("budget of source %r set to epsilon=%g delta=%g (spent epsilon=%g delta=%g)", source, body.epsilon,
             body.delta, budget.spent_epsilon, budget.spent_delta,
             extra=fields(event="budget.set", source=source, epsilon=body.epsilon, delta=body.delta))
    return json_model(BudgetView(**budget.to_dict()))


@routes.get("/v1/budgets/{source}/charges")
async def budget_charges(request: web.Request) -> web.Response:
    """The source's ledger and its charges over time, a page at a time: the first page holds the newest charges
    (`?limit=`, default and at most 1,000), oldest first within the page; `next` leads to the older ones. An
    analyst sees the amounts of every charge (they make up the shared budget) but the id, kind and name only of
    its own queries; an admin sees all."""
    st = app_state(request)
    token = await require_token(request, st.store, ANALYST)
    source = _source(request)
    limit = _limit(request, CHARGE_PAGE, CHARGE_PAGE)
    key = _after(request, "charges", (str, int))
    if key is not None and key[0] != source:
        raise HttpError(400, f"after: a cursor of the charges of another source ({key[0][:40]!r})",
                        [{"field": "after", "message": "a cursor of another source's charges"}])
    budget = await st.store.budgets.get(source, st.settings.default_budget())
    page = await st.store.reports.charge_page(source, None if token.role == "admin" else token.id, limit,
                                      None if key is None else key[1])
    charges = [ChargeView(query_id=r.query_id, kind=r.kind, name=r.name, epsilon=r.epsilon, delta=r.delta,
                          status=r.status, charged_at=r.charged_at.isoformat(),
                          refunded_at=r.refunded_at.isoformat() if r.refunded_at else None, own=r.own,
                          runs=r.runs)
               for r in page.rows]
    nxt = _cursor("charges", source, page.rows[0].charge_id) if page.more and page.rows else None
    return json_model(ChargeList(source=source, budget=BudgetView(**budget.to_dict()), charges=charges, next=nxt))


@routes.get("/v1/fleet")
async def fleet(request: web.Request) -> web.Response:
    """Devices, check-ins, cohorts by outcome with the last hour's abort reasons, and phase durations of recent
    cohorts, over every process sharing the database."""
    st = app_state(request)
    await require_token(request, st.store, ANALYST)
    r = await st.store.reports.fleet_report(st.settings.lease_ttl_s, st.metrics.checkins)
    return json_model(FleetView(
        at=r.at, devices_registered=r.devices_registered, devices_available=r.devices_available,
        devices_in_cohorts=r.devices_in_cohorts, checkins_total=r.checkins_total, processes_live=r.processes_live,
        queries=r.queries_by_status, cohorts_total=r.cohorts_total, cohorts_recent=r.cohorts_recent,
        abort_reasons=[AbortReason(reason=reason, count=n) for reason, n in r.abort_reasons],
        phase_durations={k: PhaseStatsView(**v.__dict__) for k, v in r.phase_durations.items()},
        cohorts_sampled=r.cohorts_sampled,
    ))


@routes.get("/v1/whoami")
async def whoami(request: web.Request) -> web.Response:
    """The calling token's id and role (the console signs in with it)."""
    st = app_state(request)
    token = await require_token(request, st.store, ANALYST)
    return json_model(WhoAmI(token_id=token.id, role=token.role))


@routes.get("/v1/templates")
async def templates(request: web.Request) -> web.Response:
    """A starter spec per query kind with a note on each field (what `fa init KIND` writes)."""
    st = app_state(request)
    await require_token(request, st.store, ANALYST)
    return json_model(TemplateList(templates=[
        TemplateView(kind=t.kind, title=t.title, spec=t.spec, notes=t.notes, text=t.text()) for t in TEMPLATES.values()
    ]))
