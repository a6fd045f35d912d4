"""The analyst console at `/ui/` (docs/console.md): static files shipped in `analytics_server/console/`, read once
at startup and served from memory, so no request can name a file outside that folder.

Every console response carries a strict Content-Security-Policy (only this origin's scripts, styles and
connections; no inline script or style, no frames, no plugins) and the usual hardening headers. The page
calls the analyst API with the bearer token the user typed, kept in the tab's `sessionStorage` only; it sets
no cookie, so the API needs no CSRF defence. `GET /` redirects to the console.
"""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from fa_common.http_errors import HttpError

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-cache",
}
TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".json": "application/json",
         ".md": "text/plain", ".txt": "text/plain", ".png": "image/png", ".svg": "image/svg+xml"}


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets(root: Path = CONSOLE_DIR) -> dict[str, Asset]:
    """Every file under `root` by its relative POSIX path (Python caches excluded)."""
    assets = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".py":
            continue
        body = path.read_bytes()
        ctype = TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        assets[path.relative_to(root).as_posix()] = Asset(body, ctype, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
    return assets


ASSETS = web.AppKey("console_assets", dict)
routes = web.RouteTableDef()


def _serve(request: web.Request, name: str) -> web.Response:
    asset: Asset | None = request.app[ASSETS].get(name)
    if asset is None:
        raise HttpError(404, f"no console file {name[:200]!r}")
    headers = {**HEADERS, "ETag": asset.etag}
    if request.headers.get("If-None-Match") == asset.etag:
        return web.Response(status=304, headers=headers)
    charset = "utf-8" if asset.content_type.startswith("text/") or asset.content_type.endswith("json") else None
    return web.Response(body=asset.body, content_type=asset.content_type, charset=charset, headers=headers)


@routes.get("/")
async def root(request: web.Request) -> web.Response:
    raise web.HTTPFound("/ui/")


@routes.get("/ui")
async def console_redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound("/ui/")


@routes.get("/ui/")
async def console_index(request: web.Request) -> web.Response:
    return _serve(request, "index.html")


@routes.get("/ui/{name:.+}")
async def console_file(request: web.Request) -> web.Response:
    return _serve(request, request.match_info["name"])
