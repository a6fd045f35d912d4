"""A request that meets a connection the server closed is sent once more, freshly signed, on a new
connection; pooled connections are not kept as long as the server keeps them."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from device_sdk.client import KEEPALIVE_S, DeviceClient, new_connector
from device_sdk.options import ClientOptions, NetworkOptions
from device_sdk.store import LocalStore


async def _server(close_first: int) -> tuple[asyncio.Server, list[str]]:
    """Closes the first `close_first` connections after reading a request head; answers the rest."""
    nonces: list[str] = []
    seen = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal seen
        seen += 1
        head = await reader.readuntil(b"\r\n\r\n")
        nonces.extend([line.split(b":", 1)[1].strip().decode() for line in head.split(b"\r\n")
                   if line.lower().startswith(b"x-fa-nonce:")])
        if seen <= close_first:
            writer.close()
            return
        body = b'{"ok": true}'
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), nonces


@pytest.mark.parametrize("closed", [1, 2])
async def test_a_request_on_a_closed_connection_is_sent_once_more(closed: int) -> None:
    server, nonces = await _server(close_first=closed)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    device = DeviceClient(url, LocalStore(), ClientOptions(network=NetworkOptions(checkin_wait_s=0)))
    try:
        if closed == 1:
            status, _, body = await device.request("POST", "/v1/device/checkin", b"{}", "application/json")
            assert (status, body) == (200, b'{"ok": true}')
            assert len(nonces) == 2 and nonces[0] != nonces[1]  # signed afresh: not a replay of the first
        else:  # only once: a server that keeps closing is an error for the caller (failover, leaving a cohort)
            with pytest.raises(aiohttp.ClientError):
                await device.request("POST", "/v1/device/checkin", b"{}", "application/json")
            assert len(nonces) == 2
    finally:
        await device.close()
        server.close()
        await server.wait_closed()


async def test_pooled_connections_expire_before_the_servers_idle_timeout() -> None:
    from analytics_server.settings import Settings

    connector = new_connector()
    try:
        assert connector._keepalive_timeout == KEEPALIVE_S < Settings().idle_timeout_s / 2
        assert connector.limit == 0
    finally:
        await connector.close()
