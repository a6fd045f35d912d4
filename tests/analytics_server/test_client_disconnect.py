"""A client that goes away while its answer is written (an SSE stream closed before its headers) is not a server
error: the error middleware logs no traceback for it (the end-to-end tests fail on any traceback in a server log)."""

from __future__ import annotations

import logging
from collections import Counter

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from analytics_server.http.common import make_error_middleware


class _Metrics:
    http_responses: Counter[tuple[str, int]] = Counter()


async def test_a_connection_reset_while_answering_logs_no_traceback(caplog) -> None:  # type: ignore[no-untyped-def]
    async def handler(request: web.Request) -> web.StreamResponse:
        raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")

    app = web.Application(middlewares=[make_error_middleware(_Metrics())])
    app.router.add_get("/x", handler)
    srv = TestServer(app)
    await srv.start_server()
    try:
        with caplog.at_level(logging.DEBUG):
            async with aiohttp.ClientSession() as http, http.get(srv.make_url("/x")) as r:
                assert r.status == 400
    finally:
        await srv.close()
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR or rec.exc_info], caplog.text
