"""Cross-origin access to the device API (FA_DEVICE_CORS_ORIGINS): off by default; when set, preflights of listed
origins are answered and device answers carry the headers a page needs, while other origins and the analyst API get
nothing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from analytics_server.settings import Settings

PAGE = "http://127.0.0.1:5173"
PREFLIGHT = {"Origin": PAGE, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "content-type,x-fa-protocol,x-fa-signature"}


async def test_off_by_default(app_server) -> None:  # noqa: ANN001
    async with _session() as http:
        async with http.options(app_server.make_url("/v1/device/checkin"), headers=PREFLIGHT) as r:
            assert r.status == 405 and "Access-Control-Allow-Origin" not in r.headers
        async with http.post(app_server.make_url("/v1/device/checkin"), headers={"Origin": PAGE}) as r:
            assert "Access-Control-Allow-Origin" not in r.headers


def _session():  # noqa: ANN202
    import aiohttp

    return aiohttp.ClientSession()


async def test_listed_origin_preflight_and_answers(start_app_server) -> None:  # noqa: ANN001
    srv = await start_app_server(device_cors_origins=f"{PAGE}, https://app.example.com")
    async with _session() as http:
        async with http.options(srv.make_url("/v1/device/cohorts/abc/phases/0"), headers=PREFLIGHT) as r:
            assert r.status == 204
            assert r.headers["Access-Control-Allow-Origin"] == PAGE and "X-FA-Signature" in r.headers["Access-Control-Allow-Headers"]
            assert "Access-Control-Allow-Credentials" not in r.headers
        # an unsigned device request is still refused, but the page can read why and the protocol header
        async with http.post(srv.make_url("/v1/device/checkin"), headers={"Origin": PAGE, "X-FA-Protocol": "3"}, data=b"{}") as r:
            assert r.status == 401
            assert r.headers["Access-Control-Allow-Origin"] == PAGE
            assert "X-FA-Phase" in r.headers["Access-Control-Expose-Headers"]
        async with http.options(srv.make_url("/v1/device/checkin"), headers={**PREFLIGHT, "Origin": "https://evil.example"}) as r:
            assert r.status == 405 and "Access-Control-Allow-Origin" not in r.headers
        async with http.options(srv.make_url("/v1/queries"), headers=PREFLIGHT) as r:  # the analyst API stays closed
            assert "Access-Control-Allow-Origin" not in r.headers


def test_bad_origin_setting_names_it() -> None:
    with pytest.raises(ValidationError, match="not an origin"):
        Settings(device_cors_origins="https://app.example.com/path")
    with pytest.raises(ValidationError, match="cannot be combined"):
        Settings(device_cors_origins="*, https://a.example")
