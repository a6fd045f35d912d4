"""Builds the aiohttp application: state, routes, middleware, startup (migration check, recovery) and cleanup."""

from __future__ import annotations

import importlib
import logging
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from analytics_server import issuer_keys, openapi
from analytics_server.api_models import Health, ProcessLabel
from analytics_server.auth import DeviceAuth, require_token
from analytics_server.cluster import identity_for
from analytics_server.db.engine import check_migrated, make_engine
from analytics_server.db.store import Store
from analytics_server.db.translog_store import parse_witness_keys
from analytics_server.http import analyst, console, device, transparency
from analytics_server.services import budgets_service
from analytics_server.http.common import BODY_READ_TIMEOUT, make_error_middleware
from analytics_server.http.cors import make_cors_middleware
from analytics_server.metrics import Metrics, count_statements
from analytics_server.notify import notifier_for
from analytics_server.orchestrator import Orchestrator
from analytics_server.protocols import for_benchmark
from analytics_server.pool import AVAILABILITY_SLACK_S, DevicePool
from analytics_server.settings import Settings
from analytics_server.state import STATE, AppState
from fa_common.clock import SYSTEM_CLOCK, Clock
from fa_common.ratelimit import AddressRateLimiter
from translog import entries as te


log = logging.getLogger(__name__)
OPENAPI = web.AppKey("openapi", dict)
ACCOUNTANT_MODULE = "queries.dp.report"


async def healthz(request: web.Request) -> web.Response:
    st: AppState = request.app[STATE]
    p = st.process
    body = Health(status="ok", queries_running=st.orchestrator.running_count(), cohorts_running=sum(
        1 for c in st.orchestrator.cohorts.values() if c.status == "running"),
        process=ProcessLabel(id=p.id, name=p.name, pid=p.pid, url=p.url),
        identities="issuer" if st.issuer_keys else "open", log_key="file" if st.settings.log_key_file else "database")
    return web.json_response(body.model_dump())


METRICS_ROLES = ("admin", "metrics")


async def metrics(request: web.Request) -> web.Response:
    st: AppState = request.app[STATE]
    if st.settings.metrics_need_token():
        await require_token(request, st.store, METRICS_ROLES)
    text = st.metrics.render(await st.store.queries.count_by_status())
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={"X-Content-Type-Options": "nosniff"})


async def openapi_doc(request: web.Request) -> web.Response:
    return web.json_response(request.app[OPENAPI])


def create_app(settings: Settings, *, clock: Clock | None = None, unmasked: bool = False) -> web.Application:
    """`clock`: where the orchestrator, its cohorts and the store read the time (default the system clock);
    `unmasked`: the benchmark's unmasked cohorts (`Orchestrator`), set by `fa-server` only under
    `FA_BENCH_UNMASKED=1`."""
    metrics_ = Metrics()
    cors = make_cors_middleware(settings.device_cors_origins)  # outermost: error answers carry the headers too
    app = web.Application(
        # backstop only: every route reads its body through http.common.read_body with its own, lower limit
        client_max_size=max(settings.binary_body_limit, settings.json_body_limit, settings.device_json_body_limit),
        middlewares=[*([cors] if cors else []), make_error_middleware(metrics_)],
    )
    app[OPENAPI] = openapi.build()
    app[BODY_READ_TIMEOUT] = settings.body_read_timeout_s
    app[console.ASSETS] = console.load_assets()

    async def startup(app: web.Application) -> None:
        engine = make_engine(settings.db_url)
        await check_migrated(engine, settings.db_url)
        store = Store(engine, clock or SYSTEM_CLOCK)
        executor = ThreadPoolExecutor(max_workers=settings.threads, thread_name_prefix="fa-cpu")
        # the accountant (dp_accounting, scipy: ~1 s) loads lazily; load it now, off the loop, rather than in
        # the middle of the first query that needs it
        executor.submit(importlib.import_module, ACCOUNTANT_MODULE)
        parse_witness_keys(settings.log_witness_keys)  # ValueError naming the bad key, before anything starts
        seed = transparency.load_log_seed(settings.log_key_file)
        signer = await store.log.setup(seed, settings.log_origin)
        await budgets_service.log_budget(store, te.DEFAULT_SOURCE, settings.budget_epsilon, settings.budget_delta)
        if seed is None:
            log.warning("transparency log key %s is kept in the database (no FA_LOG_KEY_FILE): anyone with database "
                        "access could re-sign a rewritten log (docs/transparency.md)", signer.key_id)
        issuer = await issuer_keys.for_settings(settings)
        if not issuer:
            log.warning("open registration: no identity issuer (FA_ISSUER_URL / FA_ISSUER_KEYS), so any key may "
                        "register a device and anyone may register many (demo profile only; docs/identities.md)")
        auth = DeviceAuth(store, settings.signature_window_s, clock=clock, require_token=bool(issuer))
        await auth.start()
        notifier = notifier_for(settings.db_url)
        pool = DevicePool(store, notifier, fresh_s=settings.retry_after_s + AVAILABILITY_SLACK_S, clock=clock)
        process = identity_for(settings)
        metrics_.process = process.name
        count_statements(engine, metrics_)
        orch = Orchestrator(store, settings, pool, metrics_, executor, process, notifier, clock=clock,
                            protocol=for_benchmark(unmasked))
        rate = settings.register_rate()
        limiter = AddressRateLimiter(rate, settings.register_burst) if rate > 0 else None
        app[STATE] = AppState(settings, store, auth, pool, metrics_, orch, executor, process, limiter, issuer)
        await notifier.start()
        pool.start()
        await orch.start()

    async def shutdown(app: web.Application) -> None:
        """Before aiohttp waits for the open requests: cohorts abort (their long-polls answer 410) and check-in
        long-polls end, so no handler is still waiting when the requests are cancelled."""
        st: AppState | None = app.get(STATE)
        if st is None:
            return
        await st.orchestrator.stop()
        st.pool.drain()

    async def cleanup(app: web.Application) -> None:
        st: AppState | None = app.get(STATE)
        if st is None:
            return
        await st.pool.stop()
        await st.orchestrator.notifier.stop()
        await st.auth.stop()
        st.executor.shutdown(wait=False, cancel_futures=True)
        await st.store.engine.dispose()

    app.on_startup.append(startup)
    app.on_shutdown.append(shutdown)
    app.on_cleanup.append(cleanup)
    app.router.add_routes(analyst.routes)
    app.router.add_routes(device.routes)
    app.router.add_routes(console.routes)
    app.router.add_routes(transparency.routes)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/openapi.json", openapi_doc)
    return app
