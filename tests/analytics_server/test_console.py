"""The console's files as served: strict security headers, every asset the page and its modules load resolves, no
inline code or markup injection in our own scripts, and the vendored chart library matches its manifest."""

from __future__ import annotations

import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer

from analytics_server.http.console import CONSOLE_DIR, CSP

ROOT = Path(__file__).resolve().parents[2]
OWN_JS = sorted((CONSOLE_DIR / "js").rglob("*.js"))


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.inline: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for name in a:
            if name.startswith("on") or name == "style":
                self.inline.append(f"<{tag} {name}>")
        if tag == "style":
            self.inline.append("<style>")
        if tag == "script":
            self._in_script = True
            if not a.get("src"):
                self.inline.append("<script> without src")
            else:
                self.refs.append(a["src"] or "")
        if tag == "link" and a.get("href"):
            self.refs.append(a["href"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append("inline script text")


async def test_console_is_served_with_strict_headers_and_every_asset_resolves(app_server: TestServer) -> None:
    base = str(app_server.make_url("")).rstrip("/")
    async with aiohttp.ClientSession() as http:
        for path in ("/", "/ui"):
            async with http.get(base + path, allow_redirects=False) as r:
                assert r.status == 302 and r.headers["Location"] == "/ui/"
        async with http.get(base + "/ui/") as r:
            assert r.status == 200 and r.content_type == "text/html"
            html = await r.text()
            headers = r.headers
        assert headers["Content-Security-Policy"] == CSP
        for directive in ("default-src 'self'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
                          "object-src 'none'", "frame-ancestors 'none'", "base-uri 'none'"):
            assert directive in CSP
        assert "unsafe" not in CSP and "http" not in CSP
        assert headers["X-Content-Type-Options"] == "nosniff" and headers["X-Frame-Options"] == "DENY"
        assert headers["Referrer-Policy"] == "no-referrer"
        page = _Page()
        page.feed(html)
        assert page.inline == []
        todo = [f"/ui/{ref}" for ref in page.refs]
        seen: set[str] = set()
        while todo:  # the page's files, then every module a module imports
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            assert not path.startswith(("//", "/ui/http")), f"an external reference: {path}"
            async with http.get(base + path) as r:
                assert r.status == 200, path
                assert r.headers["Content-Security-Policy"] == CSP
                body = await r.text()
                if path.endswith(".js"):
                    assert r.content_type == "text/javascript", path
                    folder = path.rsplit("/", 1)[0]
                    for imp in re.findall(r'^import .*? from "(\.[^"]+)";', body, re.M):
                        todo.append(_join(folder, imp))
                elif path.endswith(".css"):
                    assert r.content_type == "text/css"
        vendored = {"/ui/vendor/chart.umd.min.js", "/ui/vendor/translog.js"}  # the log verifier: the JS SDK's, bundled
        assert vendored | {"/ui/js/app.js", "/ui/js/pages/new.js", "/ui/console.css"} <= seen
        assert len([p for p in seen if p.endswith(".js")]) == len(OWN_JS) + len(vendored)  # every module of ours is reachable
        async with http.get(base + "/ui/js/app.js") as r:
            etag = r.headers["ETag"]
        async with http.get(base + "/ui/js/app.js", headers={"If-None-Match": etag}) as r:
            assert r.status == 304
        for bad in ("/ui/nope.js", "/ui/%2e%2e/app.py", "/ui/..%2fapp.py", "/ui/js/../../http/console.py", "/ui/__init__.py"):
            async with http.get(base + bad) as r:
                assert r.status == 404, bad
                assert "error" in await r.json()


def _join(folder: str, rel: str) -> str:
    parts = folder.split("/")
    for piece in rel.split("/"):
        if piece == "..":
            parts.pop()
        elif piece != ".":
            parts.append(piece)
    return "/".join(parts)


def test_own_scripts_build_markup_without_html_strings_or_eval() -> None:
    """Device and spec strings reach the page only as text: no innerHTML and friends, no eval, no inline styles."""
    banned = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\"style\"")
    for path in OWN_JS:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//", 1)[0] if not line.strip().startswith("*") else ""
            assert not banned.search(code), f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
    css = (CONSOLE_DIR / "console.css").read_text()
    assert "url(" not in css and "@import" not in css


def test_vendored_chart_library_matches_its_manifest() -> None:
    vendor = CONSOLE_DIR / "vendor"
    manifest = json.loads((vendor / "manifest.json").read_text())
    assert manifest["package"] == "chart.js" and manifest["license"] == "MIT"
    for name, digest in manifest["sha256"].items():
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == digest, name
    script = (ROOT / "scripts" / "vendor_console.sh").read_text()
    assert f"VERSION={manifest['version']}\n" in script and f"INTEGRITY={manifest['integrity']}\n" in script
    assert "MIT License" in (vendor / "chart.js.LICENSE.md").read_text()
    assert f"Chart.js v{manifest['version']}" in (vendor / "chart.umd.min.js").read_text()[:300]


def test_results_are_rendered_without_per_kind_code() -> None:
    """The result page draws the kind's tables (`view.table`): no kind name, no per-kind noise fallback, and every
    chart hint a kind gives is one results.js draws."""
    from queries.registry import KINDS

    for name in ("results.js", "format.js", "charts.js"):
        code = (CONSOLE_DIR / "js" / name).read_text()
        for kind in KINDS:
            assert f'"{kind.name}"' not in code and f"{kind.name}:" not in code, f"{name} knows the kind {kind.name}"
        assert "fallbackStd" not in code and "noise_std_released" not in code
    results = (CONSOLE_DIR / "js" / "results.js").read_text()
    drawn = set(re.findall(r'hint\.type === "(\w+)"', results))
    assert drawn == {"bar", "line"}
    from typing import get_args

    from queries.table import ChartType

    assert set(get_args(ChartType)) == drawn
