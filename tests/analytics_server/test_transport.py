"""Transport hardening in process: the nonce ledger (database is the source of truth, expiry from the
timestamp), body deadlines, JSON depth, the registration rate limit, `/metrics` access and `Allow` on 405."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiohttp import ClientSession
from sqlalchemy import text

from analytics_server.auth import DeviceAuth, RecentNonces, SignedHeaders
from analytics_server.db.engine import make_engine
from analytics_server.db.store import Store
from analytics_server.http.common import MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, json_shape
from fa_common.b64 import b64e
from fa_common.errors import Unauthenticated
from tests.signed_device import SignedDevice

class Device(SignedDevice):
    """Signs requests like the SDK (JSON bodies, for the in-process server)."""

    def headers(self, method: str, path: str, body: bytes, device: bool = True, ts: str | None = None,
                nonce: str | None = None) -> dict[str, str]:
        h = self.signed_headers(method, path, body, device=device, nonce=nonce, ts=ts)
        return {**h, "Content-Type": "application/json"}

    def register_request(self) -> tuple[bytes, dict[str, str]]:
        body = json.dumps({"public_key": b64e(self.public)}).encode()
        return body, self.headers("POST", "/v1/device/register", body, device=False)


def _hdrs(nonce: str, when: float) -> SignedHeaders:
    return SignedHeaders(str(when), when, nonce, b"")


async def test_a_nonce_claimed_by_one_process_is_refused_by_another(migrated_url: str) -> None:
    """The database, not process memory, decides: two DeviceAuth instances over one database (as two
    server processes) accept a (device, nonce) once between them, also when claims race."""
    stores = [Store(make_engine(migrated_url)) for _ in range(2)]
    auths = [DeviceAuth(s, window_s=300) for s in stores]
    try:
        now = time.time()
        await auths[0].claim("dev-a", _hdrs("n" * 16, now))
        with pytest.raises(Unauthenticated, match="replayed"):
            await auths[1].claim("dev-a", _hdrs("n" * 16, now))
        await auths[1].claim("dev-b", _hdrs("n" * 16, now))  # the same nonce of another device is fine

        # 40 concurrent claims of one nonce over both "processes" plus 40 distinct ones: one winner + 40
        async def attempt(auth: DeviceAuth, nonce: str) -> bool:
            try:
                await auth.claim("dev-c", _hdrs(nonce, now))
                return True
            except Unauthenticated:
                return False

        same = [attempt(auths[i % 2], "s" * 20) for i in range(40)]
        distinct = [attempt(auths[i % 2], f"distinct{i:08d}") for i in range(40)]
        results = await asyncio.gather(*same, *distinct)
        assert sum(results[:40]) == 1
        assert all(results[40:])
    finally:
        for s in stores:
            await s.engine.dispose()


async def test_nonce_expiry_is_timestamp_plus_window_not_receive_time(migrated_url: str) -> None:
    store = Store(make_engine(migrated_url))
    window = 300.0
    auth = DeviceAuth(store, window_s=window)
    try:
        now = time.time()
        future = now + window - 1  # accepted: inside the window
        await auth.claim("dev", _hdrs("f" * 16, future))
        # the old rule (received + window) would prune it here, while its timestamp is still accepted
        assert await store.devices.prune_nonces(now + window + 1) == 0
        with pytest.raises(Unauthenticated, match="replayed"):
            await auth.claim("dev", _hdrs("f" * 16, future))
        async with store.sessions() as s:
            (expires,) = (await s.execute(text("SELECT expires_at FROM nonces WHERE device_id = 'dev'"))).one()
        assert expires == pytest.approx(future + window)
        assert await store.devices.prune_nonces(future + window + 1) == 1  # now no request with it passes the window
    finally:
        await store.engine.dispose()


def test_read_only_nonce_memory_is_bounded_and_refuses_replays() -> None:
    recent = RecentNonces(max_entries=100)
    now = 1000.0
    assert recent.add("d", "x" * 16, now + 300, now)
    assert not recent.add("d", "x" * 16, now + 300, now)
    for i in range(1000):
        recent.add("d", f"{i:016d}", now + 300, now)
    assert len(recent) <= 100
    assert recent.add("d", "x" * 16, now + 700, now + 400)  # expired entries are forgotten


async def test_read_only_replay_is_refused_and_state_changing_replay_survives_a_new_app(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server()
    dev = Device()
    async with ClientSession(str(server.make_url(""))) as http:
        body, h = dev.register_request()
        assert (await http.post("/v1/device/register", data=body, headers=h)).status == 201
        path = "/v1/device/cohorts/" + "ab" * 16
        h = dev.headers("GET", path, b"")
        assert (await http.get(path, headers=h)).status == 404  # authenticated, unknown cohort
        r = await http.get(path, headers=h)
        assert r.status == 401 and "replayed" in (await r.json())["error"]
        ck = json.dumps({"wait_s": 0}).encode()
        h_ck = dev.headers("POST", "/v1/device/checkin", ck)
        assert (await http.post("/v1/device/checkin", data=ck, headers=h_ck)).status == 200
    other = await start_app_server()  # a second process on the same database
    async with ClientSession(str(other.make_url(""))) as http:
        r = await http.post("/v1/device/checkin", data=ck, headers=h_ck)
        assert r.status == 401 and "replayed" in (await r.json())["error"]


def test_json_shape_ignores_brackets_in_strings_and_is_linear() -> None:
    assert json_shape(b'{"a": [1, {"b": "[[[[{{{{"}]}') == (3, 3)
    assert json_shape(b'"\\"[[[["') == (0, 0)
    assert json_shape(b"[" * 1000 + b"]" * 1000) == (1000, 1000)
    assert json_shape(b"[" + b"[1],{}," * 400 + b"0]") == (2, 801)
    started = time.perf_counter()
    json_shape(b'"' + b'\\"' * 500_000)  # unterminated string of escapes: no quadratic backtracking
    json_shape(b"[" * 1_000_000)
    assert time.perf_counter() - started < 5


async def test_deeply_nested_json_is_400_on_analyst_and_device_routes(start_app_server, migrated_url: str) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server()
    store = Store(make_engine(migrated_url))
    token = await store.tokens.create("analyst")
    await store.engine.dispose()
    deep = b"[" * 1000 + b"]" * 1000
    async with ClientSession(str(server.make_url(""))) as http:
        r = await http.post("/v1/queries", data=deep, headers={"Authorization": f"Bearer {token}",
                                                                "Content-Type": "application/json"})
        assert r.status == 400 and "nested" in (await r.json())["error"]
        ok_depth = b'{"a":' * (MAX_JSON_DEPTH - 1) + b"1" + b"}" * (MAX_JSON_DEPTH - 1)
        r = await http.post("/v1/queries", data=ok_depth, headers={"Authorization": f"Bearer {token}",
                                                                    "Content-Type": "application/json"})
        assert r.status == 422  # parsed; the spec is wrong, not the JSON
        wide = b'{"kind": "histogram", "source": "s", "params": {"buckets": [' + b",".join([b"[[1]]"] * 6000) + b"]}}"
        r = await http.post("/v1/queries", data=wide, headers={"Authorization": f"Bearer {token}",
                                                                "Content-Type": "application/json"})
        assert r.status == 400 and str(MAX_JSON_CONTAINERS) in (await r.json())["error"]
        dev = Device()
        body, h = dev.register_request()
        assert (await http.post("/v1/device/register", data=body, headers=h)).status == 201
        r = await http.post("/v1/device/checkin", data=deep, headers=dev.headers("POST", "/v1/device/checkin", deep))
        assert r.status == 400 and "nested" in (await r.json())["error"]


async def test_registration_rate_limit_per_address(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server(register_rate_per_min=6, register_burst=3)
    async with ClientSession(str(server.make_url(""))) as http:
        statuses = []
        for _ in range(5):
            body, h = Device().register_request()
            r = await http.post("/v1/device/register", data=body, headers=h)
            statuses.append(r.status)
            last = r
        assert statuses == [201, 201, 201, 429, 429]
        assert int(last.headers["Retry-After"]) >= 1 and "too many registrations" in (await last.json())["error"]


async def test_metrics_need_a_token_in_production_and_are_open_in_demo(start_app_server, migrated_url: str) -> None:  # type: ignore[no-untyped-def]
    store = Store(make_engine(migrated_url))
    metrics_token, analyst_token = await store.tokens.create("metrics"), await store.tokens.create("analyst")
    await store.engine.dispose()
    prod = await start_app_server(profile="production")
    demo = await start_app_server()
    async with ClientSession(str(prod.make_url(""))) as http:
        assert (await http.get("/metrics")).status == 401
        assert (await http.get("/metrics", headers={"Authorization": f"Bearer {analyst_token}"})).status == 403
        r = await http.get("/metrics", headers={"Authorization": f"Bearer {metrics_token}"})
        assert r.status == 200 and "fa_queries" in await r.text()
        # a metrics token opens nothing else
        assert (await http.get("/v1/queries", headers={"Authorization": f"Bearer {metrics_token}"})).status == 403
    async with ClientSession(str(demo.make_url(""))) as http:
        assert (await http.get("/metrics")).status == 200
    closed_demo = await start_app_server(metrics_auth="token")
    async with ClientSession(str(closed_demo.make_url(""))) as http:
        assert (await http.get("/metrics")).status == 401


async def test_405_names_the_allowed_methods(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server()
    async with ClientSession(str(server.make_url(""))) as http:
        r = await http.delete("/v1/queries")
        assert r.status == 405
        assert {m.strip() for m in r.headers["Allow"].split(",")} >= {"GET", "POST"}
        assert "not allowed" in (await r.json())["error"]


async def test_a_body_that_stalls_gets_408(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server(body_read_timeout_s=0.5)
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(b"POST /v1/device/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-FA-Protocol: 3\r\n"
                 b"X-FA-Timestamp: " + str(int(time.time())).encode() + b"\r\nX-FA-Nonce: " + b"n" * 16 +
                 b"\r\nX-FA-Signature: " + b64e(b"\0" * 64).encode() + b"\r\nContent-Length: 1000\r\n\r\n{\"public")
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 10)
    assert status_line.split()[1] == b"408", status_line
    writer.close()


async def test_declared_oversized_body_is_refused_before_reading(start_app_server) -> None:  # type: ignore[no-untyped-def]
    server = await start_app_server(device_json_body_limit=2048)
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(b"POST /v1/device/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-FA-Protocol: 3\r\n"
                 b"X-FA-Timestamp: " + str(int(time.time())).encode() + b"\r\nX-FA-Nonce: " + b"n" * 16 +
                 b"\r\nX-FA-Signature: " + b64e(b"\0" * 64).encode() + b"\r\nContent-Length: 5000000\r\n\r\n")
    await writer.drain()  # no body at all: the answer must not wait for it
    status_line = await asyncio.wait_for(reader.readline(), 10)
    assert status_line.split()[1] == b"413", status_line
    writer.close()


def test_the_signature_window_follows_the_injected_clock() -> None:
    """A request's timestamp is judged against the server's clock (`create_app(clock=…)`), not the machine's: the
    same headers pass at the clock's time, and fail once the clock is past the window."""
    from aiohttp.test_utils import make_mocked_request

    from queries.envelope import HDR_NONCE, HDR_SIGNATURE, HDR_TIMESTAMP
    from fa_common.clock import ManualClock

    clock = ManualClock(start=1_000_000.0)  # far from the machine's time: only the injected clock can accept it
    auth = DeviceAuth(None, window_s=300.0, clock=clock)  # type: ignore[arg-type]  # no store needed for headers
    headers = {HDR_TIMESTAMP: str(clock.time()), HDR_NONCE: "n" * 16, HDR_SIGNATURE: b64e(bytes(64))}
    assert auth.signed_headers(make_mocked_request("POST", "/", headers=headers)).when == clock.time()
    clock.advance(301.0)
    with pytest.raises(Unauthenticated, match="outside the accepted window"):
        auth.signed_headers(make_mocked_request("POST", "/", headers=headers))
