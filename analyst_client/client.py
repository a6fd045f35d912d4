"""The Python analyst client: `AnalystClient` speaks the analyst HTTP API (docs/analyst.md); `values`/`rows` turn a
result into released values with their 95 % intervals; `frame` gives them as a pandas DataFrame.

```python
from analyst_client.client import AnalystClient, frame

client = AnalystClient("http://127.0.0.1:8000", token)
qid = client.submit(spec)["id"]
client.wait(qid)                       # polls until the query ends
view = client.result(qid)              # {"kind", "result", "privacy", "uncertainty"?, "warnings"?}
df = frame(view)                       # pandas (optional: pip install '.[pandas]')
```

It lives in `device_sdk` because that is where the installed client code is, but it is analyst tooling: a device
never imports it (tests/test_import_set.py). It needs only the standard library; pandas is imported when
`frame` is called. `analyst_client.cli` (the `fa` command) is built on it and re-exports `AnalystClient`.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from device_sdk.servers import parse_server_urls

TERMINAL = ("succeeded", "failed", "cancelled")
FAILOVER_STATUSES = (502, 503, 504)
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

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Submit a spec; the new query's status view (`id`, `status`, …). ApiError 422 names the bad field."""
        return self.call("POST", "/v1/queries", spec)

    def preview(self, spec: dict[str, Any]) -> dict[str, Any]:
        """What the spec would charge (ε, δ), whether it fits the source's budget, and the expected noise of every
        value it would release — without creating or charging anything. PreviewUnavailable when the server has
        no preview route; ApiError (422 naming the field) for a bad spec."""
        try:
            return self.call("POST", "/v1/queries/preview", spec)
        except ApiError as exc:
            if exc.status in (404, 405):  # no such route (405: it met GET /v1/queries/{id})
                raise PreviewUnavailable(exc.status, "this server does not offer a preview (POST /v1/queries/preview)") from None
            raise

    def status(self, query_id: str) -> dict[str, Any]:
        return self.call("GET", f"/v1/queries/{quote(query_id, safe='')}")

    def queries(self) -> list[dict[str, Any]]:
        """The caller's queries (an admin: all), newest first."""
        return self.call("GET", "/v1/queries")["queries"]

    def result(self, query_id: str) -> dict[str, Any]:
        return self.call("GET", f"/v1/queries/{quote(query_id, safe='')}/result")

    def cancel(self, query_id: str) -> dict[str, Any]:
        return self.call("POST", f"/v1/queries/{quote(query_id, safe='')}/cancel")

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
                raise TimeoutError(f"query {query_id} still {st['status']} after {timeout_s:.0f} s")
            time.sleep(poll_s)

    # -- budgets, fleet, tokens -----------------------------------------------------------------

    def budgets(self) -> dict[str, Any]:
        return self.call("GET", "/v1/budgets")

    def budget(self, source: str) -> dict[str, Any]:
        return self.call("GET", f"/v1/budgets/{quote(source, safe='')}")

    def charges(self, source: str) -> dict[str, Any]:
        """The source's ledger and its charges over time (oldest first)."""
        return self.call("GET", f"/v1/budgets/{quote(source, safe='')}/charges")

    def fleet(self) -> dict[str, Any]:
        return self.call("GET", "/v1/fleet")

    def whoami(self) -> dict[str, Any]:
        return self.call("GET", "/v1/whoami")

    def templates(self) -> list[dict[str, Any]]:
        return self.call("GET", "/v1/templates")["templates"]

    def health(self) -> dict[str, Any]:
        return self.call("GET", "/healthz")


# -- released values and their uncertainty ------------------------------------------------------------


def pointer(*parts: Any) -> str:
    """RFC 6901 JSON Pointer from path segments."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


@dataclass(frozen=True)
class Uncertainty:
    std: float
    lo: float
    hi: float
    source: str
    """"server": the result's own `uncertainty` entry; "noise": ± 1.96 σ of the round's released noise."""

    @property
    def half(self) -> float:
        return (self.hi - self.lo) / 2


def uncertainty_of(view: dict[str, Any], ptr: str, value: float | None) -> Uncertainty | None:
    """The 95 % interval of the released value at `ptr`: the server's (`view["uncertainty"][ptr]`) when given; for
    counts whose noise the privacy block states (histogram and heavy-hitter counts), value ± 1.96 σ; else None."""
    entry = (view.get("uncertainty") or {}).get(ptr)
    if isinstance(entry, dict) and isinstance(entry.get("std"), (int, float)):
        std = float(entry["std"])
        ci = entry.get("ci95")
        if isinstance(ci, list) and len(ci) == 2:
            return Uncertainty(std, float(ci[0]), float(ci[1]), "server")
        if value is not None:
            return Uncertainty(std, value - Z95 * std, value + Z95 * std, "server")
    if value is None:
        return None
    std = _noise_std(view, ptr)
    return None if std is None else Uncertainty(std, value - Z95 * std, value + Z95 * std, "noise")


def _noise_std(view: dict[str, Any], ptr: str) -> float | None:
    noise = [n for n in (view.get("privacy") or {}).get("noise") or [] if isinstance(n, dict)
             and isinstance(n.get("noise_std_released"), (int, float))]
    if not noise:
        return None
    kind = view.get("kind")
    if kind == "histogram" and ptr.startswith("/counts/"):
        return float(noise[0]["noise_std_released"])
    parts = ptr.split("/")
    if kind == "heavy_hitters" and len(parts) == 4 and parts[1] == "heavy_hitters" and parts[3] == "count":
        return max(float(n["noise_std_released"]) for n in noise)  # the noisiest round: conservative
    return None


def rows(view: dict[str, Any], spec: dict[str, Any] | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """A result as a table (columns, rows): histogram buckets, heavy hitters, one row per feature, one row per
    training evaluation round; other kinds as (key, value) pairs. Interval columns (`std`, `ci95_lo`, `ci95_hi`)
    where the value's uncertainty is known, None elsewhere."""
    kind, res = view.get("kind"), view.get("result") or {}
    if kind == "histogram":
        suppressed = list(res.get("suppressed") or [])
        order = list(res.get("counts") or {}) + [b for b in suppressed if b not in (res.get("counts") or {})]
        if spec:
            p = spec.get("params") or {}
            wanted = list(p.get("buckets") or []) + ([p["other_bucket"]] if p.get("other_bucket") else [])
            order = [b for b in wanted if b in order] + [b for b in order if b not in wanted]
        out = []
        for b in order:
            value = None if b in suppressed else res["counts"].get(b)
            u = uncertainty_of(view, pointer("counts", b), value)
            out.append({"bucket": b, "count": value, **_interval(u), "suppressed": b in suppressed})
        return ["bucket", "count", "std", "ci95_lo", "ci95_hi", "suppressed"], out
    if kind == "heavy_hitters":
        out = []
        for i, hh in enumerate(res.get("heavy_hitters") or []):
            u = uncertainty_of(view, pointer("heavy_hitters", i, "count"), hh.get("count"))
            out.append({"value": hh.get("value"), "count": hh.get("count"), **_interval(u)})
        out.sort(key=lambda r: -(r["count"] or 0))
        return ["value", "count", "std", "ci95_lo", "ci95_hi"], out
    if kind == "feature_stats":
        out = []
        for name, f in (res.get("features") or {}).items():
            u = uncertainty_of(view, pointer("features", name, "mean"), f.get("mean"))
            row = {"feature": name, **{k: f.get(k) for k in ("count", "mean", "var", "std", "lower", "upper")}}
            row |= {"mean_" + k: v for k, v in _interval(u).items()}
            out.append(row)
        return ["feature", "count", "mean", "mean_std", "mean_ci95_lo", "mean_ci95_hi", "var", "std", "lower", "upper"], out
    if kind == "training":
        history = res.get("history") or []
        keys = [k for k in dict.fromkeys(k for e in history for k in e) if k not in ("round", "clients")]
        out = []
        for i, e in enumerate(history):
            row = {"round": e.get("round")}
            for k in keys:
                row[k] = e.get(k)
                u = uncertainty_of(view, pointer("history", i, k), e.get(k)) if isinstance(e.get(k), (int, float)) else None
                if u is not None:
                    row[f"{k}_ci95_lo"], row[f"{k}_ci95_hi"] = u.lo, u.hi
            row["clients"] = e.get("clients")
            out.append(row)
        cols = ["round", *keys, "clients"]
        extra = [c for r in out for c in r if c not in cols]
        return cols + list(dict.fromkeys(extra)), out
    return ["key", "value"], [{"key": k, "value": v} for k, v in flatten(res)]


def _interval(u: Uncertainty | None) -> dict[str, float | None]:
    return {"std": u.std if u else None, "ci95_lo": u.lo if u else None, "ci95_hi": u.hi if u else None}


def flatten(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested JSON as (dotted key, scalar or comma-joined list) pairs."""
    if isinstance(obj, dict):
        out: list[tuple[str, Any]] = []
        for k, v in obj.items():
            out += flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(obj, list) and obj and all(isinstance(x, (dict, list)) for x in obj):
        out = []
        for i, v in enumerate(obj):
            out += flatten(v, f"{prefix}[{i}]")
        return out
    if isinstance(obj, list):
        return [(prefix, ", ".join(str(x) for x in obj))]
    return [(prefix, obj)]


def frame(view: dict[str, Any], spec: dict[str, Any] | None = None) -> Any:
    """The result as a pandas DataFrame (the columns of `rows`). Needs pandas: `pip install '.[pandas]'`."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("frame() needs pandas, which is not installed: pip install 'fed-analytics[pandas]' "
                          "(or pip install pandas)") from None
    columns, data = rows(view, spec)
    return pd.DataFrame(data, columns=columns)
