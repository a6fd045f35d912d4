"""`fa`: submit a query spec, follow its progress, print its result (table, JSON or CSV).

Server and token come from --server/--token or FA_SERVER/FA_TOKEN; the server may be a comma-separated list
of processes sharing one database, tried in turn when one cannot be reached. `AnalystClient` is the small
synchronous HTTP client behind the commands (also used by scripts/demo_server.py).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from device_sdk.servers import parse_server_urls
from queries.spec import QuerySpec

TERMINAL = ("succeeded", "failed", "cancelled")


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


FAILOVER_STATUSES = (502, 503, 504)


class AnalystClient:
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
        try:
            msg = json.loads(raw).get("error", raw.decode())
        except ValueError:
            msg = raw.decode("utf-8", "replace")
        return ApiError(exc.code, msg)

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", "/v1/queries", spec)

    def preview(self, spec: dict[str, Any]) -> dict[str, Any]:
        """`POST /v1/queries/preview`: the charge and the expected noise of every value, nothing created."""
        return self.call("POST", "/v1/queries/preview", spec)

    def status(self, query_id: str) -> dict[str, Any]:
        return self.call("GET", f"/v1/queries/{query_id}")

    def result(self, query_id: str) -> dict[str, Any]:
        return self.call("GET", f"/v1/queries/{query_id}/result")

    def cancel(self, query_id: str) -> dict[str, Any]:
        return self.call("POST", f"/v1/queries/{query_id}/cancel")

    def wait(self, query_id: str, timeout_s: float = 3600, on_progress: Any = None, poll_s: float = 0.5) -> dict[str, Any]:
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


def load_spec(path: str) -> dict[str, Any]:
    """Read and validate a spec file locally (same model as the server) so typos fail before submitting."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"fa: cannot read spec {path}: {exc}") from None
    try:
        QuerySpec.model_validate(raw)
    except ValidationError as exc:
        raise SystemExit(f"fa: invalid spec {path}:\n{exc}") from None
    return raw


def format_result(res: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(res, indent=2, sort_keys=True)
    rows = _flatten(res.get("result", {}))
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["key", "value"])
        w.writerows(rows)
        return buf.getvalue()
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{res.get('kind')} result")
    table.add_column("key")
    table.add_column("value", justify="right")
    for k, v in rows:
        table.add_row(k, str(v))
    privacy = res.get("privacy", {})
    table.caption = f"privacy: mechanism={privacy.get('mechanism')} epsilon={privacy.get('epsilon')} delta={privacy.get('delta')}"
    buf = io.StringIO()
    Console(file=buf, width=100, force_terminal=False).print(table)
    return buf.getvalue()


def _flatten(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        out: list[tuple[str, Any]] = []
        for k, v in obj.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(obj, list) and obj and all(isinstance(x, (dict, list)) for x in obj):
        out = []
        for i, v in enumerate(obj):
            out += _flatten(v, f"{prefix}[{i}]")
        return out
    if isinstance(obj, list):
        return [(prefix, ", ".join(str(x) for x in obj))]
    return [(prefix, obj)]


def _wait_with_bar(client: AnalystClient, query_id: str) -> dict[str, Any]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                  transient=False, console=Console(stderr=True)) as bar:  # stdout carries only the result
        task = bar.add_task(f"query {query_id}", total=None, info="")

        def update(st: dict[str, Any]) -> None:
            pr = st.get("progress", {})
            need = pr.get("need") or 0
            rounds = max(1, pr.get("rounds_upper_bound", 1))
            frac = (pr.get("rounds_done", 0) + (min(1.0, pr.get("contributors", 0) / need) if need else 0)) / rounds
            if st["status"] == "succeeded":
                frac = 1.0
            bar.update(task, total=1.0, completed=min(frac, 1.0),
                       info=f"{st['status']} round {pr.get('round')} {pr.get('contributors', 0)}/{need or '?'} {pr.get('phase') or ''}")

        return client.wait(query_id, on_progress=update)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fa", description="federated analytics: analyst CLI")
    p.add_argument("--server", default=os.environ.get("FA_SERVER", "http://127.0.0.1:8000"))
    p.add_argument("--token", default=os.environ.get("FA_TOKEN"))
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("submit", help="submit SPEC.json")
    s.add_argument("spec")
    s.add_argument("--wait", action="store_true", help="show progress until the query ends, then print the result")
    s.add_argument("--format", choices=("json", "table", "csv"), default="table")
    st = sub.add_parser("status", help="show a query's status")
    st.add_argument("id")
    r = sub.add_parser("result", help="print a query's result")
    r.add_argument("id")
    r.add_argument("--format", choices=("json", "table", "csv"), default="table")
    c = sub.add_parser("cancel", help="cancel a query")
    c.add_argument("id")
    args = p.parse_args(argv)
    if not args.token:
        p.error("a token is required: --token or FA_TOKEN (create one with `fa-server token create --role analyst`)")
    client = AnalystClient(args.server, args.token)
    try:
        if args.cmd == "submit":
            created = client.submit(load_spec(args.spec))
            print(created["id"], file=sys.stderr if args.wait else sys.stdout, flush=True)
            if not args.wait:
                return 0
            final = _wait_with_bar(client, created["id"])
            if final["status"] != "succeeded":
                print(f"fa: query {final['id']} {final['status']}: {final.get('error') or ''}", file=sys.stderr)
                return 1
            print(format_result(client.result(created["id"]), args.format))
        elif args.cmd == "status":
            print(json.dumps(client.status(args.id), indent=2))
        elif args.cmd == "result":
            print(format_result(client.result(args.id), args.format))
        elif args.cmd == "cancel":
            print(json.dumps(client.cancel(args.id), indent=2))
    except ApiError as exc:
        print(f"fa: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"fa: cannot reach {args.server}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
