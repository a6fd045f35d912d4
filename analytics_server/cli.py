"""`fa-server`: serve, migrate, token create / list / revoke.

Any failure to reach or use the database (unreachable host, missing driver, bad URL, unmigrated schema)
is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import base64
import asyncio
import errno
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from analytics_server.db.engine import NotMigratedError, check_migrated, make_engine, migrate, settle_driver_threads
from analytics_server.db.store import ROLES, Store, TokenRow
from analytics_server.settings import Settings

T = TypeVar("T")
EXIT_USAGE = 2
DB_ERRORS = (SQLAlchemyError, ImportError, OSError, TimeoutError)
"""What reaching a database can raise: unreachable (OSError/timeout, DBAPIError), driver not installed
(ImportError, NoSuchModuleError), malformed URL (ArgumentError)."""


class CliError(Exception):
    """A failure reported as one line and exit code 2."""


def _settings(args: argparse.Namespace) -> Settings:
    pairs = (("db_url", args.db), ("host", getattr(args, "host", None)), ("port", getattr(args, "port", None)),
             ("advertise_url", getattr(args, "advertise_url", None)))
    overrides = {k: v for k, v in pairs if v is not None}
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        parts = [f"{'.'.join(str(x) for x in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors(include_url=False)]
        raise CliError("invalid setting: " + "; ".join(parts)) from None


def safe_url(url: str) -> str:
    """The URL with its password masked (for messages)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return repr(url[:100])


def describe_db_error(url: str, exc: BaseException) -> str:
    """One line naming what went wrong with the database at `url`."""
    where = safe_url(url)
    if isinstance(exc, (NoSuchModuleError, ImportError)):
        return f"cannot use database {where}: its driver is not installed ({_first_line(exc)})"
    if isinstance(exc, ArgumentError):
        return f"cannot use database {where}: not a valid database URL ({_first_line(exc)})"
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    if isinstance(exc, TimeoutError):
        return f"cannot reach database {where}: connection timed out"
    return f"cannot reach database {where}: {type(exc).__name__}: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def _db(url: str, work: Callable[[], T]) -> T:
    """Run a database step; database failures become CliError with one line."""
    try:
        return work()
    except NotMigratedError:
        raise
    except DB_ERRORS as exc:
        raise CliError(describe_db_error(url, exc)) from None


def _with_store(url: str, fn: Callable[[Store], Awaitable[T]]) -> T:
    async def go() -> T:
        engine = make_engine(url)
        try:
            await check_migrated(engine, url)
            return await fn(Store(engine))
        finally:
            await engine.dispose()
            await settle_driver_threads()

    return _db(url, lambda: asyncio.run(go()))


async def _check(url: str) -> None:
    engine = make_engine(url)
    try:
        await check_migrated(engine, url)
    finally:
        await engine.dispose()
        await settle_driver_threads()


def format_tokens(rows: list[TokenRow]) -> str:
    header = ("id", "prefix", "role", "created", "revoked", "label")
    table = [header] + [
        (str(r.id), r.prefix or "-", r.role, r.created_at.isoformat(timespec="seconds"), "yes" if r.revoked else "no", r.label or "")
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fa-server", description="federated analytics server")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_serve = sub.add_parser("serve", help="run the HTTP server")
    p_serve.add_argument("--db", help="database URL (default: FA_DB_URL or sqlite+aiosqlite:///./fa.db)")
    p_serve.add_argument("--host", help="address to listen on (default: FA_HOST or 127.0.0.1)")
    p_serve.add_argument("--port", type=int, help="port to listen on (default: FA_PORT or 8000)")
    p_serve.add_argument("--migrate", action="store_true", help="apply migrations before serving")
    p_serve.add_argument("--advertise-url", help="base URL devices reach this process at for its cohorts "
                         "(default FA_ADVERTISE_URL or http://HOST:PORT)")
    p_serve.add_argument("--workers", type=int, default=1,
                         help="run N processes on this machine sharing --port (PostgreSQL only; docs/scaling.md)")
    p_serve.add_argument("--worker-ports", type=int, metavar="BASE",
                         help="with --workers: worker i also listens on, and advertises, port BASE+i (default PORT+1)")
    p_serve.add_argument("--shared-port", action="store_true", help=argparse.SUPPRESS)  # set by the supervisor
    p_serve.add_argument("--private-port", type=int, help=argparse.SUPPRESS)
    p_mig = sub.add_parser("migrate", help="apply database migrations")
    p_mig.add_argument("--db", help="database URL (default: FA_DB_URL or sqlite+aiosqlite:///./fa.db)")
    p_mig.add_argument("--verbose", "-v", action="store_true", help="show alembic's INFO lines (quiet by default)")
    p_tok = sub.add_parser("token", help="manage tokens")
    tok_sub = p_tok.add_subparsers(dest="tok_cmd", required=True)
    p_create = tok_sub.add_parser("create", help="create a bearer token and print it")
    p_create.add_argument("--role", required=True, choices=ROLES, help="what the token may do")
    p_create.add_argument("--label", help="a free-text note shown by `token list`")
    p_create.add_argument("--db", help="database URL (default: FA_DB_URL or sqlite+aiosqlite:///./fa.db)")
    p_list = tok_sub.add_parser("list", help="list tokens: id, prefix, role, created, revoked, label")
    p_list.add_argument("--db", help="database URL (default: FA_DB_URL or sqlite+aiosqlite:///./fa.db)")
    p_revoke = tok_sub.add_parser("revoke", help="revoke a token by id or by its prefix (as shown by list)")
    p_revoke.add_argument("token", metavar="ID|PREFIX", help="the token's id or its prefix")
    p_revoke.add_argument("--db", help="database URL (default: FA_DB_URL or sqlite+aiosqlite:///./fa.db)")
    p_key = sub.add_parser("log-key", help="write a new transparency-log signing key to FILE (for FA_LOG_KEY_FILE) "
                           "and print its public key (docs/transparency.md)")
    p_key.add_argument("file", help="where to write the key (created with mode 0600; never overwritten)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return _run(args)
    except (NotMigratedError, CliError) as exc:
        print(f"fa-server: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _run(args: argparse.Namespace) -> int:
    if args.cmd == "log-key":
        from translog.keyfile import KeyFileError, new_key_file

        try:
            signer = new_key_file(args.file)
        except KeyFileError as exc:
            raise CliError(str(exc)) from None
        print(f"public key (apps pin it: DevicePolicy(log_keys=[...])): {base64.b64encode(signer.public_key).decode()}")
        print(f"key id: {signer.key_id}; set FA_LOG_KEY_FILE={args.file}")
        return 0
    settings = _settings(args)
    url = settings.db_url
    if args.cmd == "serve":
        from analytics_server import logs

        logs.setup(settings.log_format, settings.log_level)
    if args.cmd == "migrate":
        if not args.verbose:
            logging.getLogger("alembic").setLevel(logging.WARNING)  # its INFO lines: `--verbose` shows them
        _db(url, lambda: migrate(url))
        print(f"migrated {safe_url(url)}")
        return 0
    if args.cmd == "token":
        logging.getLogger("alembic").setLevel(logging.WARNING)  # the schema check's chatter: not for token output
        if args.tok_cmd == "create":
            print(_with_store(url, lambda st: st.tokens.create(args.role, args.label)))
        elif args.tok_cmd == "list":
            print(format_tokens(_with_store(url, lambda st: st.tokens.all_rows())))
        else:
            try:
                row = _with_store(url, lambda st: st.tokens.revoke(args.token))
            except LookupError as exc:
                raise CliError(exc.args[0] if exc.args else "no such token") from None
            print(f"revoked token {row.id} ({row.role}{', ' + row.prefix if row.prefix else ''})")
        return 0
    problem = settings.identity_setup_error() or settings.log_setup_error()
    if problem:
        raise CliError(problem)
    if not 1 <= args.workers <= 64:
        raise CliError(f"--workers: must be between 1 and 64, got {args.workers}")
    if args.workers > 1:
        from analytics_server import supervisor

        try:
            supervisor.check(settings, args.workers)
        except supervisor.WorkersRefused as exc:
            raise CliError(str(exc)) from None
    if args.migrate:
        _db(url, lambda: migrate(url))
    _db(url, lambda: asyncio.run(_check(url)))
    from analytics_server import serving

    if args.workers > 1:
        return supervisor.run_workers(settings, args.workers, args.worker_ports, url)
    from analytics_server.issuer_keys import IssuerKeysError

    try:
        serving.run(settings, shared_port=args.shared_port, private_port=args.private_port)
    except IssuerKeysError as exc:  # e.g. FA_ISSUER_URL unreachable at start
        raise CliError(str(exc)) from None
    except DB_ERRORS as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise CliError(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}") from None
        raise CliError(describe_db_error(url, exc)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
