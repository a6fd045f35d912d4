"""The Python analyst client: `AnalystClient` speaks the analyst HTTP API (docs/analyst.md); `rows` turns a
result's display tables (`view["table"]`, built by the query kind on the server: docs/analyst.md) into plain
rows with the 95 % interval of every released value; `frame` gives them as a pandas DataFrame.

```python
from analyst_client.client import AnalystClient, frame

client = AnalystClient("http://127.0.0.1:8000", token)
qid = client.submit(spec)["id"]
client.wait(qid)                       # polls until the query ends
view = client.result(qid)              # {"kind", "result", "privacy", "uncertainty", "warnings", "table"}
df = frame(view)                       # pandas (optional: pip install '.[pandas]')
```

Lists are paged on the server (docs/server.md, "Paging"); `queries`, `charges` and `budgets` follow the `next`
cursors to the end and return everything, calling `on_page(count)` after each page (a progress display).

It is analyst tooling: a device never imports it (tests/test_import_set.py). It needs only the standard library
(and the pure `queries.table` for results from a server without tables); pandas is imported when `frame` is
called. `analyst_client.cli` (the `fa` command) is built on it and re-exports `AnalystClient`.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from device_sdk.servers import parse_server_urls

TERMINAL = ("succeeded", "failed", "cancelled")
FAILOVER_STATUSES = (502, 503, 504)
QUERY_PAGE = 500
"""Queries asked for per page (the server's most)."""
LIST_PAGE = 1000
"""Charges and sources asked for per page (the server's most)."""
OnPage = Callable[[int], None]
"""Called after each page of a list with the number of rows read so far."""
Z95 = 1.959963984540054
"""Two-sided 95 % quantile of the standard normal."""


class ApiError(Exception):
    """An HTTP error answer: `status`, the server's `message` and, for 422s, `detail` ([{field, message}])."""

    def __init__(self, status: int, message: str, detail: list[dict[str, Any]] | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.detail = detail or []


class PreviewUnavailable(ApiError):
    """The server has no `POST /v1/queries/preview` (an older server)."""


class AnalystClient:
    """Synchronous client of the analyst API. `server` is one URL or several (processes sharing a database,
    comma-separated or a list), tried in turn when one cannot be reached."""

    def __init__(self, server: str | list[str], token: str, timeout_s: float = 30.0) -> None:
        self.servers = parse_server_urls(server, "server")
        self._current = 0
        self.token = token
        self.timeout = timeout_s

    @property
    def server(self) -> str:
        return self.servers[self._current]

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """One request, failing over to the next server URL: a GET after any connection failure or a 502/503/504;
        a POST/PUT only when the connection was refused (nothing reached the server). A POST whose answer was lost
        may have been carried out (a query submitted, charged to a budget): retrying it elsewhere could do it
        twice, so that error is raised instead."""
        idempotent = method == "GET"
        for attempt in range(len(self.servers)):
            try:
                return self._call_once(method, path, body)
            except urllib.error.HTTPError as exc:
                if idempotent and exc.code in FAILOVER_STATUSES and attempt + 1 < len(self.servers):
                    self._next()
                    continue
                raise self._api_error(exc) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                reason = getattr(exc, "reason", exc)
                refused = isinstance(reason, ConnectionRefusedError)
                if (idempotent or refused) and attempt + 1 < len(self.servers):
                    self._next()
                    continue
                raise
        raise AssertionError("unreachable")

    def _next(self) -> None:
        self._current = (self._current + 1) % len(self.servers)
        print(f"fa: switching to server {self.server}", file=sys.stderr)

    def _call_once(self, method: str, path: str, body: Any) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        if self.token:  # the public routes (health, the transparency log) need none
            req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read() or b"null")

    @staticmethod
    def _api_error(exc: urllib.error.HTTPError) -> ApiError:
        raw = exc.read()
        detail = None
        try:
            body = json.loads(raw)
            msg = body.get("error", raw.decode())
            detail = body.get("detail") if isinstance(body.get("detail"), list) else None
        except (ValueError, AttributeError):
            msg = raw.decode("utf-8", "replace")
        return ApiError(exc.code, msg, detail)

    # -- queries --------------------------------------------------------------------------------

    def _object(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """`call` for a route whose answer is a JSON object (every route below)."""
        answer: dict[str, Any] = self.call(method, path, body)
        return answer

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Submit a spec; the new query's status view (`id`, `status`, …). ApiError 422 names the bad field."""
        return self._object("POST", "/v1/queries", spec)

    def preview(self, spec: dict[str, Any]) -> dict[str, Any]:
        """What the spec would charge (ε, δ), whether it fits the source's budget, and the expected noise of every
        value it would release — without creating or charging anything. PreviewUnavailable when the server has
        no preview route; ApiError (422 naming the field) for a bad spec."""
        try:
            return self._object("POST", "/v1/queries/preview", spec)
        except ApiError as exc:
            if exc.status in (404, 405):  # no such route (405: it met GET /v1/queries/{id})
                raise PreviewUnavailable(exc.status, "this server does not offer a preview (POST /v1/queries/preview)") from None
            raise

    def status(self, query_id: str) -> dict[str, Any]:
        return self._object("GET", f"/v1/queries/{quote(query_id, safe='')}")

    def pages(self, path: str, key: str, params: dict[str, str] | None = None,
              on_page: OnPage | None = None) -> Iterator[dict[str, Any]]:
        """Every page of a paged list route (docs/server.md, "Paging"), following `next` to the end (the last
        page has none); `key` names the page's list. A server that does not page answers once, without `next`."""
        query = dict(params or {})
        seen: set[str] = set()
        count = 0
        while True:
            page = self._object("GET", f"{path}?{urlencode(query)}" if query else path)
            count += len(page.get(key) or [])
            if on_page is not None:
                on_page(count)
            yield page
            nxt = page.get("next")
            if not nxt:
                return
            if not isinstance(nxt, str) or nxt in seen:
                raise ApiError(502, f"GET {path}: the server's `next` cursor does not lead on ({str(nxt)[:40]!r})")
            seen.add(nxt)
            query["after"] = nxt

    def queries(self, with_spec: bool = False, on_page: OnPage | None = None,
                most: int | None = None) -> list[dict[str, Any]]:
        """Every query of the caller (an admin: all), newest first, page by page; `with_spec`: each with its
        spec (a server that cannot list specs leaves `spec` null); `most`: only the newest `most`."""
        size = QUERY_PAGE if most is None else max(1, min(QUERY_PAGE, most))
        params = {"limit": str(size)} | ({"spec": "true"} if with_spec else {})
        out: list[dict[str, Any]] = []
        for page in self.pages("/v1/queries", "queries", params, on_page):
            out += page.get("queries") or []
            if most is not None and len(out) >= most:
                return out[:most]
        return out

    def result(self, query_id: str) -> dict[str, Any]:
        return self._object("GET", f"/v1/queries/{quote(query_id, safe='')}/result")

    def cancel(self, query_id: str) -> dict[str, Any]:
        return self._object("POST", f"/v1/queries/{quote(query_id, safe='')}/cancel")

    def wait(self, query_id: str, timeout_s: float = 3600, on_progress: Callable[[dict[str, Any]], None] | None = None,
             poll_s: float = 0.5) -> dict[str, Any]:
        """Poll until the query ends; its final status view. TimeoutError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.status(query_id)
            if on_progress:
                on_progress(st)
            if st["status"] in TERMINAL:
                return st
            if time.monotonic() > deadline:
                progress = json.dumps(st.get("progress") or {}, separators=(",", ":"))[:400]
                raise TimeoutError(f"query {query_id} still {st['status']} after {timeout_s:.0f} s (progress: {progress})")
            time.sleep(poll_s)

    # -- budgets, fleet, tokens -----------------------------------------------------------------

    def budgets(self, on_page: OnPage | None = None) -> dict[str, Any]:
        """Every source's ledger (`budgets`, by name, all pages) and the default totals."""
        first: dict[str, Any] | None = None
        rows: list[dict[str, Any]] = []
        for page in self.pages("/v1/budgets", "budgets", {"limit": str(LIST_PAGE)}, on_page):
            first = first or page
            rows += page.get("budgets") or []
        assert first is not None
        return _merged(first, "budgets", rows)

    def budget(self, source: str) -> dict[str, Any]:
        return self._object("GET", f"/v1/budgets/{quote(source, safe='')}")

    def charges(self, source: str, on_page: OnPage | None = None, page_size: int = LIST_PAGE) -> dict[str, Any]:
        """The source's ledger (`budget`, as the first page gave it) and all its charges over time, oldest first
        (the pages come newest first), `page_size` per request."""
        first: dict[str, Any] | None = None
        pages: list[list[dict[str, Any]]] = []
        for page in self.pages(f"/v1/budgets/{quote(source, safe='')}/charges", "charges", {"limit": str(page_size)},
                               on_page):
            first = first or page
            pages.append(page.get("charges") or [])
        assert first is not None
        return _merged(first, "charges", [row for page in reversed(pages) for row in page])

    def fleet(self) -> dict[str, Any]:
        return self._object("GET", "/v1/fleet")

    def whoami(self) -> dict[str, Any]:
        return self._object("GET", "/v1/whoami")

    def templates(self) -> list[dict[str, Any]]:
        templates: list[dict[str, Any]] = self._object("GET", "/v1/templates")["templates"]
        return templates

    def health(self) -> dict[str, Any]:
        return self._object("GET", "/healthz")


def _merged(first: dict[str, Any], key: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The first page with `key` holding every page's rows (and no `next`: nothing follows)."""
    out = dict(first)
    out[key] = rows
    out.pop("next", None)
    return out


# -- released values and their uncertainty ------------------------------------------------------------


def pointer(*parts: Any) -> str:
    """RFC 6901 JSON Pointer from path segments."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


@dataclass(frozen=True)
class Uncertainty:
    std: float
    lo: float
    hi: float

    @property
    def half(self) -> float:
        return (self.hi - self.lo) / 2


def uncertainty_of(view: dict[str, Any], ptr: str | None, value: Any = None) -> Uncertainty | None:
    """The 95 % interval of the released value at `ptr`, as the server gives it (`view["uncertainty"][ptr]`: every
    noisy value has one); None for exact values."""
    entry = (view.get("uncertainty") or {}).get(ptr) if ptr is not None else None
    if not isinstance(entry, dict) or not isinstance(entry.get("std"), (int, float)):
        return None
    std = float(entry["std"])
    ci = entry.get("ci95")
    if isinstance(ci, list) and len(ci) == 2:
        return Uncertainty(std, float(ci[0]), float(ci[1]))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Uncertainty(std, value - Z95 * std, value + Z95 * std)
    return None


def tables(view: dict[str, Any]) -> list[dict[str, Any]]:
    """The result's display tables (`view["table"]`, queries.table); from a server without them, the generic
    key/value flattening of the result."""
    given = view.get("table")
    if isinstance(given, list) and given:
        return given
    from queries.table import flatten

    return [flatten(view.get("result") or {}).to_json()]


def table_of(view: dict[str, Any], section: str | None = None) -> dict[str, Any]:
    """One table of the result: the first (the main one) or the one called `section`; KeyError naming the sections."""
    all_tables = tables(view)
    if section is None:
        return all_tables[0]
    for t in all_tables:
        if t.get("name") == section:
            return t
    raise KeyError(f"section: no table {section!r} in this result (sections: {', '.join(str(t.get('name')) for t in all_tables)})")


def _noisy_columns(table: dict[str, Any]) -> list[str]:
    """The value columns with at least one released number (a cell with a path): they get interval columns."""
    return [c["name"] for c in table.get("columns") or [] if c.get("role") == "value"
            and any((r.get(c["name"]) or {}).get("path") for r in table.get("rows") or [])]


def rows(view: dict[str, Any], spec: dict[str, Any] | None = None,
         section: str | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """A result table as (columns, rows) of plain values: every column of the table (`table_of`), and after each value
    column holding released numbers its uncertainty — `std`, `ci95_lo`, `ci95_hi` when the table has one such column
    (histogram counts, heavy-hitter counts), else prefixed with the column's name (`mean_std`, `loss_ci95_lo`) —
    None where a value is exact or not released. `spec` is accepted for compatibility and not needed."""
    t = table_of(view, section)
    noisy = _noisy_columns(t)
    names: list[str] = []
    for c in t.get("columns") or []:
        names.append(c["name"])
        if c["name"] in noisy:
            prefix = "" if len(noisy) == 1 else c["name"] + "_"
            names += [prefix + "std", prefix + "ci95_lo", prefix + "ci95_hi"]
    out = []
    for r in t.get("rows") or []:
        row: dict[str, Any] = {}
        for c in t.get("columns") or []:
            cell = r.get(c["name"]) or {}
            row[c["name"]] = cell.get("value")
            if c["name"] in noisy:
                prefix = "" if len(noisy) == 1 else c["name"] + "_"
                u = uncertainty_of(view, cell.get("path"), cell.get("value"))
                row |= {prefix + "std": u.std if u else None, prefix + "ci95_lo": u.lo if u else None,
                        prefix + "ci95_hi": u.hi if u else None}
        out.append(row)
    return names, out


def flatten(obj: Any) -> list[tuple[str, Any]]:
    """Nested JSON as (dotted key, scalar or comma-joined list) pairs (the generic table, queries.table.flatten)."""
    from queries.table import flatten as flatten_table

    return [(r["key"].value, r["value"].value) for r in flatten_table(obj).rows]


def frame(view: dict[str, Any], spec: dict[str, Any] | None = None, section: str | None = None) -> Any:
    """A result table as a pandas DataFrame (the columns of `rows`). Needs pandas: `pip install '.[pandas]'`."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("frame() needs pandas, which is not installed: pip install 'fed-analytics[pandas]' "
                          "(or pip install pandas)") from None
    columns, data = rows(view, spec, section)
    return pd.DataFrame(data, columns=columns)
