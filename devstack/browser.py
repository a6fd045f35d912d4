"""Headless Chromium for the console's browser tests and screenshots: Playwright for Python driving the system's
Chromium from Debian's packages (`scripts/install_chromium.sh`). Nothing is downloaded: Playwright is pointed
at /usr/bin/chromium and never runs `playwright install`.

Development tooling, not shipped. `console_page(base_url, token)` signs in and yields a page whose console
messages, page errors and failed requests are collected in `problems` (a test asserts it stays empty).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("FA_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic", "--disable-dev-shm-usage",
]
"""Chromium flags: no sandbox (tests run as root), and no background connections to the vendor's services
(this machine has no network but the package registries)."""


def chromium_available() -> str | None:
    """None when the browser tests can run, else why not."""
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        return f"Chromium not found at {CHROMIUM} (run scripts/install_chromium.sh, or set FA_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install '.[dev]')"
    return None


@dataclass
class ConsoleSession:
    page: Any
    base_url: str
    problems: list[str] = field(default_factory=list)

    def goto(self, route: str, timeout_ms: float = 20_000) -> None:
        """Open a console route (`#/queries`, `#/q/ID`, …) and wait until that page marks itself ready."""
        self.page.goto(f"{self.base_url}/ui/{route}")
        self.wait_ready(timeout_ms)

    def wait_ready(self, timeout_ms: float = 20_000) -> None:
        """Until the page now in the address bar has rendered (`<main data-ready data-route=HASH>`)."""
        self.page.wait_for_function(
            "() => { const m = document.querySelector('main'); return m && m.dataset.ready === '1' "
            "&& m.dataset.route === location.hash; }", timeout=timeout_ms)

    def shot(self, path: Path, full_page: bool = True) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=full_page)
        return path


@contextmanager
def console_page(base_url: str, token: str | None, viewport: tuple[int, int] = (1280, 900)) -> Iterator[ConsoleSession]:
    """A fresh browser profile and page on the console; signed in through the sign-in form when `token` is given."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:  # Playwright gives the browser a fresh, temporary profile
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}, device_scale_factor=1)
            page = context.new_page()
            session = ConsoleSession(page, base_url.rstrip("/"))
            page.on("console", lambda m: session.problems.append(f"console.{m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: session.problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: session.problems.append(f"request failed: {r.url} {r.failure}")
                    if not r.url.endswith("/events") else None)
            if token is not None:
                session.goto("#/signin")
                page.fill("#token", token)
                page.click("form.signin button[type=submit]")
                page.wait_for_selector("[data-testid=who]")
                session.wait_ready()
            yield session
        finally:
            browser.close()
