"""The aiohttp app in process: migration check, tokens and roles, OpenAPI, metrics, CLI refusal."""

from __future__ import annotations

import os
import socket

import asyncio
from pathlib import Path

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from analytics_server import cli, openapi
from analytics_server.app import create_app
from analytics_server.db.engine import NotMigratedError, check_migrated, make_engine
from analytics_server.db.store import Store
from analytics_server.settings import Settings


async def test_unmigrated_database_is_refused(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    engine = make_engine(url)
    with pytest.raises(NotMigratedError, match="fa-server migrate"):
        await check_migrated(engine, url)
    await engine.dispose()


def test_cli_serve_refuses_unmigrated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    assert cli.main(["serve", "--db", url, "--port", "0"]) == 2
    assert "fa-server migrate" in capsys.readouterr().err
    assert cli.main(["migrate", "--db", url]) == 0
    assert cli.main(["token", "create", "--role", "analyst", "--db", url]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("fa_")


async def test_tokens_are_stored_hashed_and_roles_enforced(app_server: TestServer, migrated_url: str) -> None:
    store = Store(make_engine(migrated_url))
    analyst = await store.tokens.create("analyst")
    admin = await store.tokens.create("admin")
    with pytest.raises(ValueError, match="role"):
        await store.tokens.create("root")
    async with store.sessions() as s:
        from sqlalchemy import text

        hashes = [h for (h,) in await s.execute(text("SELECT token_hash FROM tokens"))]
    assert analyst not in hashes and len(hashes) == 2
    await store.engine.dispose()
    async with ClientSession(str(app_server.make_url(""))) as http:
        r = await http.get("/v1/queries", headers={"Authorization": f"Bearer {analyst}"})
        assert r.status == 200 and (await r.json()) == {"queries": []}
        r = await http.get("/v1/admin/queries/x/contributors", headers={"Authorization": f"Bearer {analyst}"})
        assert r.status == 403
        r = await http.get("/v1/admin/queries/x/contributors", headers={"Authorization": f"Bearer {admin}"})
        assert r.status == 404
        r = await http.get("/v1/queries")
        assert r.status == 401 and "Authorization" in (await r.json())["error"]


async def test_openapi_covers_every_route(app_server: TestServer) -> None:
    doc = openapi.build()
    routes = {(r.method.lower(), r.resource.canonical) for r in app_server.app.router.routes() if r.resource is not None}
    for method, path, *_ in openapi.ROUTES:
        assert (method, path) in routes, (method, path)
    documented = {(m, p) for m, p, *_ in openapi.ROUTES}
    for method, path in routes:
        if method != "head":
            assert (method, path) in documented, (method, path)
    schemas = doc["components"]["schemas"]
    assert {"QuerySpec", "QueryView", "ResultView", "CheckinResponse", "Assignment", "ErrorBody"} <= set(schemas)
    assert schemas["QuerySpec"]["additionalProperties"] is False


async def test_metrics_and_health(app_server: TestServer) -> None:
    async with ClientSession(str(app_server.make_url(""))) as http:
        r = await http.get("/healthz")
        health = await r.json()
        text = await (await http.get("/metrics")).text()
    assert health["status"] == "ok"
    proc = health["process"]
    assert proc["pid"] == os.getpid() and proc["name"] == f"{socket.gethostname()}:{os.getpid()}"
    label = f'process="{proc["name"]}"'  # every series names its process
    assert f'fa_queries{{status="running",{label}}} 0' in text
    assert f'fa_cohorts_total{{outcome="aborted",{label}}} 0' in text
    assert f"fa_device_checkins_total{{{label}}} 0" in text
    statements = [line for line in text.splitlines() if line.startswith("fa_db_statements_total{")]
    assert len(statements) == 1 and int(statements[0].split()[-1]) > 0


async def test_app_startup_fails_on_unmigrated(tmp_path: Path) -> None:
    settings = Settings(db_url=f"sqlite+aiosqlite:///{tmp_path / 'none.db'}")
    server = TestServer(create_app(settings))
    with pytest.raises(NotMigratedError):
        await server.start_server()
    await asyncio.sleep(0)
    await server.close()
