"""`fa`, the analyst CLI: submit, follow and read queries; list them; budgets; check a spec before spending ε;
starter specs. The result alone goes to stdout; progress, ids and messages go to stderr, so
`fa submit SPEC --wait --format json > out.json` writes valid JSON (docs/analyst.md).

Server and token come from --server/--token or FA_SERVER/FA_TOKEN; the server may be a comma-separated list of
processes sharing one database, tried in turn when one cannot be reached. Exit codes: 0 success; 1 an API
error, an unreachable server or a query that did not succeed; 2 bad usage or an unreadable/invalid spec file;
3 `fa validate` checked the spec locally but the server offers no preview. `fa audit` exits 1 on any finding;
`fa witness` exits 2 when the log's head does not extend the last head it cosigned (it then prints both).

`fa ls`, `fa budget` and `fa audit` read every page of the server's lists (docs/server.md, "Paging"), with a
progress bar on stderr when that takes more than a second.

The HTTP client is `analyst_client.client.AnalystClient` (re-exported here), the text views are in
`analyst_client.view`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from analyst_client.client import TERMINAL, AnalystClient, ApiError, PreviewUnavailable, flatten
from analyst_client.view import (
    format_budgets,
    format_charges,
    format_preview,
    format_queries,
    format_result,
    format_status,
    progress_fraction,
    progress_text,
)
from queries import jsonc
from queries.field_hints import error_text
from queries.spec import QuerySpec

__all__ = ["AnalystClient", "ApiError", "PreviewUnavailable", "TERMINAL", "format_result", "load_spec", "main"]
_flatten = flatten  # the name scripts/demo_server.py imports
EXIT_FAILED, EXIT_USAGE, EXIT_NO_PREVIEW = 1, 2, 3


class SpecError(Exception):
    """A spec file that cannot be read, parsed or validated (exit code 2)."""


def _say(*parts: Any) -> None:
    print("fa:", *parts, file=sys.stderr, flush=True)


def load_spec(path: str, sets: list[str] | None = None) -> dict[str, Any]:
    """Read a spec file (JSON; `//` and `/* */` comments allowed), apply `--set` overrides and validate it
    locally with the server's own models, so typos fail before anything is sent. `-` reads stdin."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise SpecError(f"cannot read spec {path}: {exc.strerror or exc}") from None
    try:
        raw = jsonc.loads(text)
    except (ValueError, jsonc.CommentError) as exc:
        raise SpecError(f"spec {path} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"spec {path}: expected a JSON object, got {type(raw).__name__}")
    for item in sets or []:
        apply_set(raw, item)
    check_spec(raw, path)
    return raw


def check_spec(raw: dict[str, Any], path: str = "spec") -> None:
    """Validate the envelope (`QuerySpec`) and the kind's params locally; SpecError naming the fields."""
    try:
        spec = QuerySpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(f"invalid spec {path}:\n{_errors(exc, model=QuerySpec)}") from None
    from queries.kind import QueryKindError
    from queries.registry import get_kind

    try:
        kind = get_kind(spec.kind)
    except QueryKindError as exc:
        raise SpecError(f"invalid spec {path}: {exc}") from None
    try:
        kind.parse_params(spec.params)
    except ValidationError as exc:
        raise SpecError(f"invalid spec {path}:\n{_errors(exc, 'params', getattr(kind, 'Params', None))}") from None
    except ImportError:
        pass  # a check that needs the server's extras (the DP accountant): the server makes it
    except ValueError as exc:
        raise SpecError(f"invalid spec {path}: params: {exc}") from None


def _errors(exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(x) for x in ((prefix,) if prefix else ()) + tuple(err["loc"]))
        out.append(f"  {loc or 'spec'}: {error_text(err, model)}")
    return "\n".join(out)


def apply_set(spec: dict[str, Any], item: str) -> None:
    """`KEY=VALUE`: set a dotted field of the spec. VALUE is JSON (else a string); `@FILE` reads JSON from a
    file and `@FILE#/json/pointer` a part of it (e.g. `params.scaling=@stats.json#/result`)."""
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise SpecError(f"--set {item!r}: expected KEY=VALUE")
    if value.startswith("@"):
        name, _, ptr = value[1:].partition("#")
        try:
            parsed: Any = jsonc.loads(Path(name).read_text())
        except OSError as exc:
            raise SpecError(f"--set {key}: cannot read {name}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise SpecError(f"--set {key}: {name} is not valid JSON: {exc}") from None
        parsed = _resolve(parsed, ptr, f"--set {key}: {name}")
    else:
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
    target = spec
    parts = key.split(".")
    for part in parts[:-1]:
        nxt = target.get(part)
        if nxt is None:
            nxt = target[part] = {}
        if not isinstance(nxt, dict):
            raise SpecError(f"--set {key}: {part} is not an object")
        target = nxt
    target[parts[-1]] = parsed


def _resolve(doc: Any, ptr: str, where: str) -> Any:
    if not ptr:
        return doc
    if not ptr.startswith("/"):
        raise SpecError(f"{where}: {ptr!r} is not a JSON Pointer (it starts with /)")
    for raw in ptr.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise SpecError(f"{where}: nothing at {ptr}")
    return doc


class Reporter:
    """Progress of a query on stderr: a rich bar on a terminal; elsewhere (a log, a pipe) one line whenever the
    round, phase or status changes."""

    def __init__(self, query_id: str) -> None:
        self.query_id = query_id
        self.tty = sys.stderr.isatty()
        self._last = ""
        self._bar: Any = None
        if self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(BarColumn(bar_width=24), TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                                 console=Console(stderr=True), transient=False)
            self._task = self._bar.add_task("", total=1.0, info="")  # the id is on the line above

    def __enter__(self) -> Reporter:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, view: dict[str, Any]) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=progress_fraction(view), info=progress_text(view))
            return
        line = progress_text(view, countdown=False)
        if line != self._last:
            self._last = line
            _say(f"query {self.query_id}: {line}")


class Walking:
    """Progress of reading long lists (pages of queries, charges, log entries) on stderr, shown only once a walk
    has taken a second: a rich bar on a terminal, elsewhere a line every few seconds. `update(stage, done, total)`
    is the `progress` of `audit_log`; `page(stage)` gives the `on_page` of the client's list calls."""

    SHOW_AFTER_S = 1.0
    LINE_EVERY_S = 5.0

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self._start = time.monotonic()
        self._last_line = 0.0
        self._bar: Any = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> Walking:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()

    def page(self, stage: str) -> Callable[[int], None]:
        return lambda done: self.update(stage, done, None)

    def update(self, stage: str, done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - self._start < self.SHOW_AFTER_S:
            return
        if not self.tty:
            if now - self._last_line >= self.LINE_EVERY_S:
                self._last_line = now
                _say(f"reading {stage}: {done:,}" + (f" of {total:,}" if total else ""))
            return
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self._bar.start()
        task = self._tasks.get(stage)
        if task is None:
            task = self._tasks[stage] = self._bar.add_task(f"reading {stage}", total=total)
        self._bar.update(task, completed=done, total=total)


def _width() -> int:
    try:
        return max(80, min(160, os.get_terminal_size(sys.stdout.fileno()).columns)) if sys.stdout.isatty() else 120
    except OSError:
        return 120


def _out(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


_ID = "the query id (`fa submit` prints it; `fa ls` lists them)"
_FORMAT_RESULT = "table: readable, values rounded to their noise (default); json: the whole result; csv: the first section's rows"
_FORMAT_LIST = "table: readable (default); json: the server's answer"


def _wait_timeout(parser: argparse.ArgumentParser, default: float, help: str, *old: str) -> None:
    """`--wait-timeout SECONDS`, the one name of every subcommand's bound on waiting; `old` spellings still work
    but are hidden from --help."""
    parser.add_argument("--wait-timeout", dest="wait_timeout", type=float, default=default, metavar="SECONDS", help=help)
    for name in old:
        parser.add_argument(name, dest="wait_timeout", type=float, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fa", description="federated analytics: the analyst CLI (results on stdout, "
                                "progress and messages on stderr)")
    p.add_argument("--server", default=os.environ.get("FA_SERVER", "http://127.0.0.1:8000"),
                   help="server URL, or comma-separated URLs (default FA_SERVER or http://127.0.0.1:8000)")
    p.add_argument("--token", default=os.environ.get("FA_TOKEN"), help="bearer token (default FA_TOKEN)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per HTTP request")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    fmt_result = ("table", "json", "csv")

    s = sub.add_parser("submit", help="submit a spec (prints the query id, or with --wait the result)")
    s.add_argument("spec", help="spec file (JSON, comments allowed; - for stdin)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field, e.g. cohort.min_clients=50 or params.scaling=@stats.json#/result")
    s.add_argument("--wait", action="store_true", help="follow the query on stderr until it ends, then print the result")
    _wait_timeout(s, 3600.0, "seconds --wait follows the query before giving up (default 3600)")
    s.add_argument("--format", choices=fmt_result, default="table", help=_FORMAT_RESULT)
    s.add_argument("--plot", action="store_true", help="with --wait and --format table: terminal bars and sparklines")

    st = sub.add_parser("status", help="a query's status: round, phase, answers, time to the phase deadline")
    st.add_argument("id", help=_ID)
    st.add_argument("--format", choices=("text", "json"), default="text",
                    help="text: readable lines (default); json: the server's status view")

    r = sub.add_parser("result", help="print a query's result")
    r.add_argument("id", help=_ID)
    r.add_argument("--format", choices=fmt_result, default="table", help=_FORMAT_RESULT)
    r.add_argument("--plot", action="store_true", help="terminal bars (counts, feature histograms) and sparklines (training)")

    w = sub.add_parser("wait", help="follow a query on stderr until it ends, then print its result")
    w.add_argument("id", help=_ID)
    _wait_timeout(w, 3600.0, "seconds to follow the query before giving up (default 3600)", "--timeout-s")
    w.add_argument("--format", choices=fmt_result, default="table", help=_FORMAT_RESULT)
    w.add_argument("--plot", action="store_true", help="with --format table: terminal bars and sparklines")

    c = sub.add_parser("cancel", help="cancel a query")
    c.add_argument("id", help=_ID)

    ls = sub.add_parser("ls", help="list queries, newest first")
    ls.add_argument("--status", choices=("pending", "running", "succeeded", "failed", "cancelled", "active"),
                    help="only queries with this status (active: pending or running)")
    ls.add_argument("--format", choices=("table", "json"), default="table", help=_FORMAT_LIST)
    ls.add_argument("--limit", type=int, metavar="N", help="only the newest N queries (default: all, read page by page)")

    b = sub.add_parser("budget", help="privacy budgets of all sources, or one source with its charges")
    b.add_argument("source", nargs="?", help="a source: its budget and charges over time (default: all sources)")
    b.add_argument("--format", choices=("table", "json"), default="table", help=_FORMAT_LIST)

    v = sub.add_parser("validate", help="check a spec and preview its charge and noise without spending anything")
    v.add_argument("spec", help="spec file (JSON, comments allowed; - for stdin)")
    v.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field before checking, as for submit")
    v.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: readable preview (default); json: the server's preview")

    i = sub.add_parser("init", help="write a commented starter spec for a kind (no kind: list the kinds)")
    i.add_argument("kind", nargs="?", help="the query kind; omit it to list the kinds with a line on each")
    i.add_argument("-o", "--output", help="file to write (default: stdout)")
    i.add_argument("--force", action="store_true", help="overwrite --output")

    au = sub.add_parser("audit", help="audit the server's public transparency log (token optional; exit 1 on a finding)",
                        description="Fetch every signed head and entry of the transparency log, verify the heads, "
                        "recompute the roots, budgets and spend, and (with a token) compare what the server reports "
                        "with what it logged (docs/transparency.md). Exit 0: nothing found; 1: findings, or the audit "
                        "could not run.")
    au.add_argument("--state", metavar="FILE",
                    help="JSON file with the newest head of the last clean audit: the log must extend it; updated "
                         "when this audit finds nothing")
    au.add_argument("--log-key", action="append", default=[], metavar="B64",
                    help="pin a log public key (base64, repeatable: current and previous keys); default: the keys "
                         "the server serves (reported as not pinned)")
    au.add_argument("--json", action="store_true", help="print the report as JSON")

    wi = sub.add_parser("witness", help="cosign the log's newest head if it extends the last one cosigned",
                        description="A transparency-log witness (docs/transparency.md): verify the newest head under "
                        "the pinned log key, check it extends the last head this witness cosigned, cosign it and post "
                        "the cosignature. Exit 2 (and print both heads) when the log does not extend it.")
    wi.add_argument("--key", required=True, metavar="FILE", help="the witness key: a base64 32-byte Ed25519 seed")
    wi.add_argument("--init-key", action="store_true",
                    help="write a fresh key to --key (which must not exist) and print its public key")
    wi.add_argument("--state", metavar="FILE", help="the witness's memory: the last head cosigned and the pinned log "
                                                    "key (required unless --init-key)")
    wi.add_argument("--log", metavar="URL", help="the log's server (default: --server)")
    wi.add_argument("--log-key", action="append", default=[], metavar="B64",
                    help="pin the log public key (base64, repeatable); default: the state's, else the served key on "
                         "first use")
    wi.add_argument("--name", help="the witness's name in its cosignatures (default fa-witness@HOST)")
    when = wi.add_mutually_exclusive_group()
    when.add_argument("--interval", type=float, metavar="S", help="run a pass every S seconds until stopped")
    when.add_argument("--once", action="store_true", help="one pass (the default)")

    pg = sub.add_parser("ping", help="check that the server answers (no token needed)")
    _wait_timeout(pg, 0.0, "keep trying this long until the server answers (default 0: one try)", "--wait")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.cmd == "init":
            return _init(args)
        if args.cmd == "ping":
            return _ping(args)
        if args.cmd == "audit":
            return _audit(args)
        if args.cmd == "witness":
            return _witness(args)
        if not args.token:
            parser.error("a token is required: --token or FA_TOKEN (create one with `fa-server token create --role analyst`)")
        client = AnalystClient(args.server, args.token, timeout_s=args.timeout)
        return COMMANDS[args.cmd](client, args)
    except SpecError as exc:
        _say(exc)
        return EXIT_USAGE
    except ValueError as exc:  # a malformed --server
        _say(exc)
        return EXIT_USAGE
    except ApiError as exc:
        _say(_api_message(exc))
        return EXIT_FAILED
    except TimeoutError as exc:
        _say(exc)
        return EXIT_FAILED
    except OSError as exc:
        _say(f"cannot reach {args.server}: {getattr(exc, 'reason', exc)}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        _say("interrupted (the query keeps running on the server; `fa cancel ID` stops it)")
        return 130


def _api_message(exc: ApiError) -> str:
    text = f"HTTP {exc.status}: {exc.message}"
    if exc.detail and len(exc.detail) > 1:
        text += "".join(f"\n  {d.get('field')}: {d.get('message')}" for d in exc.detail)
    return text


def _submit(client: AnalystClient, args: argparse.Namespace) -> int:
    spec = load_spec(args.spec, args.set)
    created = client.submit(spec)
    qid = created["id"]
    if not args.wait:
        _out(qid)
        return 0
    _say(f"submitted query {qid} ({created['kind']} over {created['source']!r}); following it (Ctrl-C stops following)")
    return _follow_and_print(client, qid, args.format, args.plot, args.wait_timeout, spec)


def _follow_and_print(client: AnalystClient, qid: str, fmt: str, plot: bool, timeout: float, spec: dict[str, Any]) -> int:
    with Reporter(qid) as rep:
        final = client.wait(qid, timeout_s=timeout, on_progress=rep.update)
    if final["status"] != "succeeded":
        _say(f"query {qid} {final['status']}" + (f": {final['error']}" if final.get("error") else ""))
        return EXIT_FAILED
    _out(format_result(client.result(qid), fmt, spec, plot, _width()))
    return 0


def _wait(client: AnalystClient, args: argparse.Namespace) -> int:
    spec = client.status(args.id).get("spec") or {}
    return _follow_and_print(client, args.id, args.format, args.plot, args.wait_timeout, spec)


def _status(client: AnalystClient, args: argparse.Namespace) -> int:
    view = client.status(args.id)
    _out(json.dumps(view, indent=2) if args.format == "json" else format_status(view))
    return 0


def _result(client: AnalystClient, args: argparse.Namespace) -> int:
    spec = client.status(args.id).get("spec") if args.format != "json" else None
    _out(format_result(client.result(args.id), args.format, spec, args.plot, _width()))
    return 0


def _cancel(client: AnalystClient, args: argparse.Namespace) -> int:
    view = client.cancel(args.id)
    _out(f"{view['id']} {view['status']}")
    return 0


def _ls(client: AnalystClient, args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        _say(f"--limit: must be at least 1, got {args.limit}")
        return EXIT_USAGE
    with Walking() as walking:
        queries = client.queries(on_page=walking.page("queries"), most=args.limit)
    if args.status == "active":
        queries = [q for q in queries if q["status"] not in TERMINAL]
    elif args.status:
        queries = [q for q in queries if q["status"] == args.status]
    _out(json.dumps(queries, indent=2) if args.format == "json" else format_queries(queries, _width()))
    return 0


def _budget(client: AnalystClient, args: argparse.Namespace) -> int:
    if args.source:
        with Walking() as walking:
            data = client.charges(args.source, on_page=walking.page("charges"))
        _out(json.dumps(data, indent=2) if args.format == "json" else format_charges(data, _width()))
    else:
        with Walking() as walking:
            data = client.budgets(on_page=walking.page("sources"))
        _out(json.dumps(data, indent=2) if args.format == "json" else format_budgets(data, _width()))
    return 0


def _validate(client: AnalystClient, args: argparse.Namespace) -> int:
    spec = load_spec(args.spec, args.set)
    try:
        preview = client.preview(spec)
    except PreviewUnavailable as exc:
        _say(f"{args.spec}: valid locally, but {exc.message}: its charge, budget fit and noise were not checked")
        return EXIT_NO_PREVIEW
    _out(json.dumps(preview, indent=2) if args.format == "json" else format_preview(preview, _width()))
    fits = (preview.get("budget") or {}).get("fits")
    if fits is False:
        _say(f"{args.spec}: the query does not fit the remaining budget of source {spec.get('source')!r}")
        return EXIT_FAILED
    return 0


def kinds_text() -> str:
    """One line per registered kind: its name and what it answers (from its starter spec's title)."""
    from queries.registry import KINDS
    from queries.templates import TEMPLATES

    width = max(len(kind.name) for kind in KINDS)
    lines = []
    for kind in KINDS:
        template = TEMPLATES.get(kind.name)
        about = template.title.removeprefix(f"{kind.name}:").strip() if template else "(no starter spec)"
        lines.append(f"{kind.name.ljust(width)}  {about}")
    return "\n".join(lines)


def _init(args: argparse.Namespace) -> int:
    from queries.templates import TEMPLATES

    if args.kind is None:
        _out(kinds_text())
        _say("write a starter spec with `fa init KIND -o spec.json`")
        return 0
    template = TEMPLATES.get(args.kind)
    if template is None:
        _say(f"no template for kind {args.kind!r}; known kinds: {', '.join(TEMPLATES)}")
        return EXIT_USAGE
    text = template.text()
    if not args.output:
        _out(text)
        return 0
    out = Path(args.output)
    if out.exists() and not args.force:
        _say(f"{out} exists; use --force to overwrite it")
        return EXIT_USAGE
    out.write_text(text)
    _say(f"wrote {out}: a {args.kind} spec with a note on each field; check it with `fa validate {out}`")
    return 0


def _ping(args: argparse.Namespace) -> int:
    client = AnalystClient(args.server, args.token or "", timeout_s=min(args.timeout, 5.0))
    deadline = time.monotonic() + args.wait_timeout
    while True:
        try:
            health = client.health()
        except (OSError, ApiError) as exc:
            if time.monotonic() >= deadline:
                _say(f"cannot reach {client.server}: {getattr(exc, 'reason', exc)}")
                return EXIT_FAILED
            time.sleep(0.2)
            continue
        process = health.get("process") or {}
        _out(f"{client.server} ok: process {process.get('name')}, {health.get('queries_running')} queries running")
        return 0


def _keys_arg(values: list[str], option: str) -> list[bytes]:
    import base64
    import binascii

    keys = []
    for v in values:
        try:
            raw = base64.b64decode(v.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise SpecError(f"{option} {v[:60]!r}: not base64") from None
        if len(raw) != 32:
            raise SpecError(f"{option} {v[:60]!r}: {len(raw)} bytes, an Ed25519 public key is 32")
        keys.append(raw)
    return keys


def _audit(args: argparse.Namespace) -> int:
    from analyst_client.audit import AuditError, audit_log
    from analyst_client.view import format_audit

    keys = _keys_arg(args.log_key, "--log-key")
    if not args.token:
        _say("no token: auditing the public log only (with --token or FA_TOKEN the audit also compares the server's "
             "queries, results and ledger with it)")
    try:
        with Walking() as walking:
            report = audit_log(args.server, state=args.state, token=args.token, log_keys=keys or None,
                               timeout_s=args.timeout, progress=walking.update)
    except AuditError as exc:
        _say(f"audit: {exc}")
        return EXIT_FAILED
    _out(json.dumps(report.to_json(), indent=2) if args.json else format_audit(report.to_json(), _width()))
    if report.ok:
        _say("audit: no findings" + (f"; saved the head of size {report.head.size} to {args.state}"
                                      if report.state_saved and report.head else ""))
        return 0
    _say(f"audit: {len(report.findings)} finding(s)" + ("; the state file was not updated" if args.state else ""))
    return EXIT_FAILED


EXIT_INCONSISTENT = 2


def _witness(args: argparse.Namespace) -> int:
    from analyst_client.witness import WitnessError, init_key, read_key, witness_once

    if args.init_key:
        try:
            signer = init_key(args.key)
        except WitnessError as exc:
            _say(exc)
            return EXIT_FAILED
        import base64

        _out(f"{base64.b64encode(signer.public_key).decode('ascii')}")
        _say(f"wrote a new witness key to {args.key} (key id {signer.key_id}); give the server "
             f"FA_LOG_WITNESS_KEYS=NAME={base64.b64encode(signer.public_key).decode('ascii')}")
        return 0
    if not args.state:
        _say("witness: --state FILE is required (the witness's memory of the last head it cosigned)")
        return EXIT_USAGE
    keys = _keys_arg(args.log_key, "--log-key")
    server = args.log or args.server
    try:
        seed = read_key(args.key)
    except WitnessError as exc:
        _say(exc)
        return EXIT_FAILED
    while True:
        try:
            res = witness_once(server, seed=seed, state=args.state, log_keys=keys or None, name=args.name,
                               timeout_s=args.timeout)
        except (WitnessError, OSError) as exc:
            reason = exc if isinstance(exc, WitnessError) else f"cannot reach {server}: {getattr(exc, 'reason', exc)}"
            _say(f"witness: {reason}")
            if args.interval is None:
                return EXIT_FAILED
        else:
            if res.status == "inconsistent":
                _out(json.dumps({"error": res.message, "cosigned": res.previous, "served": res.head,
                                 "consistency_proof": res.proof}, indent=2))
                _say(f"witness: NOT cosigning: {res.message}; both signed heads are printed above")
                return EXIT_INCONSISTENT
            _say(f"witness: cosigned the head of size {res.head['size']} (root {res.head['root']})"
                 + ("" if res.stored is not False else "; the server already held this witness's cosignature"))
        if args.interval is None:
            return 0
        try:
            time.sleep(max(0.1, args.interval))
        except KeyboardInterrupt:
            return 130


COMMANDS = {"submit": _submit, "wait": _wait, "status": _status, "result": _result, "cancel": _cancel, "ls": _ls,
            "budget": _budget, "validate": _validate}


if __name__ == "__main__":
    sys.exit(main())
