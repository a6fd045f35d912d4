"""`fa-server`: serve, migrate, token create."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from aiohttp import web

from analytics_server.db.engine import NotMigratedError, check_migrated, make_engine, migrate
from analytics_server.db.store import ROLES, Store
from analytics_server.settings import Settings


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {k: v for k, v in (("db_url", args.db), ("host", getattr(args, "host", None)), ("port", getattr(args, "port", None))) if v is not None}
    return Settings(**overrides)


async def _check(url: str) -> None:
    engine = make_engine(url)
    try:
        await check_migrated(engine, url)
    finally:
        await engine.dispose()


async def _create_token(url: str, role: str, label: str | None) -> str:
    engine = make_engine(url)
    try:
        await check_migrated(engine, url)
        return await Store(engine).create_token(role, label)
    finally:
        await engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fa-server", description="federated analytics server")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_serve = sub.add_parser("serve", help="run the HTTP server")
    p_serve.add_argument("--db", help="database URL (default: FA_DB_URL or sqlite+aiosqlite:///./fa.db)")
    p_serve.add_argument("--host")
    p_serve.add_argument("--port", type=int)
    p_serve.add_argument("--migrate", action="store_true", help="apply migrations before serving")
    p_mig = sub.add_parser("migrate", help="apply database migrations")
    p_mig.add_argument("--db")
    p_tok = sub.add_parser("token", help="manage tokens")
    tok_sub = p_tok.add_subparsers(dest="tok_cmd", required=True)
    p_create = tok_sub.add_parser("create", help="create a bearer token and print it")
    p_create.add_argument("--role", required=True, choices=ROLES)
    p_create.add_argument("--label")
    p_create.add_argument("--db")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = _settings(args)

    try:
        if args.cmd == "migrate":
            migrate(settings.db_url)
            print(f"migrated {settings.db_url}")
            return 0
        if args.cmd == "token":
            print(asyncio.run(_create_token(settings.db_url, args.role, args.label)))
            return 0
        if args.migrate:
            migrate(settings.db_url)
        asyncio.run(_check(settings.db_url))
    except NotMigratedError as exc:
        print(f"fa-server: {exc}", file=sys.stderr)
        return 2
    from analytics_server.app import create_app

    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    web.run_app(
        create_app(settings), host=settings.host, port=settings.port, shutdown_timeout=3.0,
        print=lambda m: print(m, flush=True),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
