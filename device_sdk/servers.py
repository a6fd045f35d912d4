"""Server URL lists: the SDK and `fa` accept one URL or several (processes sharing one database)."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit


def parse_server_urls(server_url: str | Sequence[str], name: str = "server_url") -> list[str]:
    """One URL, a sequence of URLs, or one string of comma-separated URLs → a list of base URLs (no trailing
    slash); ValueError naming `name` when it is empty or a URL is not http(s)://host[:port][/path]."""
    items = server_url.split(",") if isinstance(server_url, str) else list(server_url)
    urls = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{name}: expected URL strings, got {type(item).__name__}")
        url = item.strip().rstrip("/")
        if not url:
            continue
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ValueError(f"{name}: {url[:200]!r} is not an http(s)://host[:port] URL")
        urls.append(url)
    if not urls:
        raise ValueError(f"{name}: no server URL given")
    return urls
