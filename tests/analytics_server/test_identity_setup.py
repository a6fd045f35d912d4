"""A server's identity settings (docs/identities.md): the production profile does not start without an identity
issuer, nor does any server whose configured issuer cannot be read or lists no keys — it would otherwise admit
devices it should refuse. The demo profile without one runs with open registration (tests/device_sdk/
test_identity_tokens_http.py shows it says so)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from analytics_server import cli, issuer_keys
from analytics_server.app import create_app
from analytics_server.issuer_keys import IssuerKeysError
from analytics_server.settings import Settings
from devstack.processes import free_port
from tests.analytics_server.conftest import fixed_issuer_keys


def test_serve_in_production_without_an_issuer_is_refused_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FA_PROFILE", "production")
    for name in ("FA_ISSUER_URL", "FA_ISSUER_KEYS"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["serve", "--db", f"sqlite+aiosqlite:///{tmp_path / 'none.db'}"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("fa-server: the production profile needs an identity issuer: set FA_ISSUER_URL"), err
    assert "Traceback" not in err
    assert not (tmp_path / "none.db").exists()


def test_settings_say_which_setups_may_serve() -> None:
    assert Settings().identity_setup_error() is None  # demo, open registration
    assert "FA_ISSUER_URL" in (Settings(profile="production").identity_setup_error() or "")
    assert Settings(profile="production", issuer_url="http://127.0.0.1:9").identity_setup_error() is None


async def _keys_server(body: object, port: int | None = None) -> TestServer:
    app = web.Application()

    async def keys(_: web.Request) -> web.Response:
        return web.json_response(body)

    app.router.add_get("/v1/issuer/keys", keys)
    server = TestServer(app, port=port)
    await server.start_server()
    return server


@pytest.mark.parametrize("profile", ["demo", "production"])
async def test_an_issuer_that_lists_no_keys_stops_the_start(migrated_url: str, profile: str) -> None:
    issuer = await _keys_server({"token_type": 2, "keys": []})
    server = TestServer(create_app(Settings(db_url=migrated_url, profile=profile,
                                            issuer_url=str(issuer.make_url("")).rstrip("/"))))
    try:
        with pytest.raises(IssuerKeysError, match="lists no keys"):
            await server.start_server()
    finally:
        await server.close()
        await issuer.close()


async def test_an_unreachable_issuer_stops_the_start(migrated_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(issuer_keys, "FETCH_TIMEOUT_S", 1.0)  # how long the server waits for the issuer to answer
    server = TestServer(create_app(Settings(db_url=migrated_url, issuer_url="http://127.0.0.1:9")))
    try:
        with pytest.raises(IssuerKeysError, match=r"FA_ISSUER_URL: cannot read http://127\.0\.0\.1:9/v1/issuer/keys"):
            await server.start_server()
    finally:
        await server.close()


async def test_the_server_waits_for_an_issuer_started_beside_it(
        migrated_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """`fa-issuer serve &` then `fa-server serve &`: the server's start waits until the issuer answers."""
    port = free_port()
    server = TestServer(create_app(Settings(db_url=migrated_url, issuer_url=f"http://127.0.0.1:{port}")))
    with caplog.at_level(logging.INFO, logger="analytics_server.issuer_keys"):
        starting = asyncio.create_task(server.start_server())
        for _ in range(600):  # until the server has tried and found nobody listening
            if any("not answering yet" in r.getMessage() for r in caplog.records) or starting.done():
                break
            await asyncio.sleep(0.05)
        assert not starting.done(), starting
        issuer = await _keys_server({"token_type": 2, "keys": [{"public_key": fixed_issuer_keys()}]}, port)
        try:
            await asyncio.wait_for(starting, 60)
            async with aiohttp.ClientSession() as http:
                assert (await (await http.get(str(server.make_url("/healthz")))).json())["identities"] == "issuer"
        finally:
            await server.close()
            await issuer.close()
