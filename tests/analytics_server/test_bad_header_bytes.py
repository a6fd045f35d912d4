"""A NUL (or another invalid byte) in a request header gets a 400 from aiohttp and at most one log line: the
server's `aiohttp.server` filter (analytics_server.serving.quiet_bad_requests) turns aiohttp's "Error handling
request" traceback into one WARNING without exc_info (the end-to-end tests fail on any traceback in a server log)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from analytics_server.serving import quiet_bad_requests


async def _raw_request(host: str, port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()


@pytest.mark.parametrize("header", [b"X-Test: a\x00b", b"X-T\x00est: ab", b"X-Test: a\x01\x7fb"])
async def test_invalid_header_bytes_give_400_and_no_traceback(caplog, header: bytes) -> None:  # type: ignore[no-untyped-def]
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    quiet_bad_requests()
    app = web.Application()
    app.router.add_get("/x", handler)
    srv = TestServer(app, host="127.0.0.1")
    await srv.start_server()
    try:
        with caplog.at_level(logging.DEBUG):
            reply = await _raw_request(
                "127.0.0.1", srv.port or 0, b"GET /x HTTP/1.1\r\nHost: h\r\n" + header + b"\r\n\r\n")
    finally:
        await srv.close()
    assert reply.split(b"\r\n", 1)[0].split(b" ")[1] == b"400", reply[:200]
    server_records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text
    assert len(server_records) <= 1, caplog.text
    assert all("bad request from" in r.getMessage() for r in server_records), caplog.text


async def test_the_filter_is_what_removes_the_traceback(caplog) -> None:  # type: ignore[no-untyped-def]
    """Without the filter aiohttp logs the traceback: the test above would catch its removal."""
    server_log = logging.getLogger("aiohttp.server")
    saved = list(server_log.filters)
    for f in saved:
        server_log.removeFilter(f)
    app = web.Application()
    srv = TestServer(app, host="127.0.0.1")
    await srv.start_server()
    try:
        with caplog.at_level(logging.DEBUG):
            await _raw_request("127.0.0.1", srv.port or 0, b"GET /x HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n")
    finally:
        await srv.close()
        for f in saved:
            server_log.addFilter(f)
    assert [r for r in caplog.records if r.name == "aiohttp.server" and r.exc_info], caplog.text
