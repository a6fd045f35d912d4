"""Cross-origin access to the device API, for devices running in web pages (the browser SDK, device_sdk/js).

Off by default. With `FA_DEVICE_CORS_ORIGINS` set (comma-separated `scheme://host[:port]` origins, or `*`), a page of
a listed origin may call `/v1/device/*` and read the transparency log (`/v1/log/*`): preflight `OPTIONS` requests for those paths are answered here, before any
other check (a preflight carries no credentials), and every device answer to such a page carries
`Access-Control-Allow-Origin` and exposes the headers the SDK reads (`X-FA-Phase`, `X-FA-Protocol`, `Retry-After`,
`Location`). Cookies are never allowed (`Access-Control-Allow-Credentials` is not sent): device requests are
authenticated by their Ed25519 signatures alone, so a page gains nothing it could not do with its own key. The
analyst API and the console are never opened to other origins.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from analytics_server.settings import parse_origins
from queries.envelope import HDR_DEVICE, HDR_NONCE, HDR_PHASE, HDR_PROTOCOL, HDR_SIGNATURE, HDR_TIMESTAMP

DEVICE_PREFIX = "/v1/device/"
PREFIXES = (DEVICE_PREFIX, "/v1/log/")
"""The device API and the public transparency log, which a device reads for the log's key (docs/transparency.md)."""
ALLOW_HEADERS = ", ".join(["Content-Type", HDR_PROTOCOL, HDR_DEVICE, HDR_TIMESTAMP, HDR_NONCE, HDR_SIGNATURE])
EXPOSE_HEADERS = ", ".join([HDR_PHASE, HDR_PROTOCOL, "Retry-After", "Location"])
MAX_AGE_S = 600


def make_cors_middleware(raw: str) -> Any | None:
    """The middleware for the setting's origins, or None when cross-origin access is off."""
    if not raw.strip():
        return None
    allowed = parse_origins(raw)

    def allows(origin: str | None) -> bool:
        return origin is not None and (allowed is None or origin in allowed)

    @web.middleware
    async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if origin is None or not request.path.startswith(PREFIXES) or not allows(origin):
            return await handler(request)
        headers = {"Access-Control-Allow-Origin": origin if allowed is not None else "*", "Vary": "Origin"}
        if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
            return web.Response(status=204, headers={
                **headers, "Access-Control-Allow-Methods": "GET, POST", "Access-Control-Allow-Headers": ALLOW_HEADERS,
                "Access-Control-Max-Age": str(MAX_AGE_S),
            })
        resp = await handler(request)
        resp.headers.update({**headers, "Access-Control-Expose-Headers": EXPOSE_HEADERS})
        return resp

    return cors
