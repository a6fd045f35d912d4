"""`fa-server` as a subprocess: token list / revoke (revoked tokens get 401), and one friendly line with exit
code 2 — no traceback — when the database is unreachable or its driver is not installed."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from devstack.processes import BIN
from tests.support.cli_help import options_without_help, parser_of


def fa_server(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "fa-server"), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "FA_DB_URL": ""})


async def test_token_list_and_revoke(app_server: TestServer, migrated_url: str) -> None:
    # the in-process server shares the event loop: run the CLI in a thread so the loop (and any
    # transaction it has open on the SQLite file) keeps going
    async def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(fa_server, *args)

    created = [await cli("token", "create", "--role", role, "--label", label, "--db", migrated_url)
               for role, label in (("analyst", "ci"), ("analyst", "alice"), ("metrics", "prom"))]
    assert all(c.returncode == 0 for c in created)
    tokens = [c.stdout.strip().splitlines()[-1] for c in created]
    listing = await cli("token", "list", "--db", migrated_url)
    assert listing.returncode == 0, listing.stderr
    header, *rows = listing.stdout.strip().splitlines()
    assert header.split() == ["id", "prefix", "role", "created", "revoked", "label"]
    assert [r.split()[0] for r in rows] == ["1", "2", "3"]
    assert rows[0].split()[1] == tokens[0][:10] and rows[0].split()[2] == "analyst" and rows[0].split()[-2:] == ["no", "ci"]
    assert all(t not in listing.stdout for t in tokens)  # never the token itself

    async with ClientSession(str(app_server.make_url(""))) as http:
        async def status(token: str) -> int:
            async with http.get("/v1/queries", headers={"Authorization": f"Bearer {token}"}) as r:
                return r.status

        assert await status(tokens[1]) == 200
        revoked = await cli("token", "revoke", tokens[1][:10], "--db", migrated_url)  # by prefix
        assert revoked.returncode == 0 and "revoked token 2" in revoked.stdout, revoked.stderr
        assert await status(tokens[1]) == 401
        assert await status(tokens[0]) == 200
        assert (await cli("token", "revoke", "1", "--db", migrated_url)).returncode == 0  # by id
        assert await status(tokens[0]) == 401

    rows = (await cli("token", "list", "--db", migrated_url)).stdout.strip().splitlines()[1:]
    assert [r.split()[4] for r in rows] == ["yes", "yes", "no"]
    for arg in ("99", "fa_nosuch"):
        out = await cli("token", "revoke", arg, "--db", migrated_url)
        assert out.returncode == 2 and out.stderr.startswith("fa-server: no token") and "Traceback" not in out.stderr
    short = await cli("token", "revoke", "fa_", "--db", migrated_url)
    assert short.returncode == 2 and "at least 4 characters" in short.stderr
    db_file = migrated_url.split("///", 1)[1]
    with sqlite3.connect(db_file, timeout=60) as conn:  # two tokens whose shown prefixes collide
        conn.execute("INSERT INTO tokens (token_hash, prefix, role, created_at, revoked) VALUES "
                     "('h1', 'fa_Same123', 'analyst', '2026-01-01', 0), ('h2', 'fa_Same456', 'analyst', '2026-01-01', 0)")
    ambiguous = await cli("token", "revoke", "fa_Same", "--db", migrated_url)
    assert ambiguous.returncode == 2 and "matches 2 tokens" in ambiguous.stderr
    assert (await cli("token", "revoke", "fa_Same4", "--db", migrated_url)).returncode == 0


COMMANDS = [("serve", "--port", "0"), ("migrate",), ("token", "create", "--role", "analyst"), ("token", "list"),
            ("token", "revoke", "1")]


@pytest.mark.parametrize(
    "url, expected, commands",
    [
        ("postgresql+asyncpg://fa:s3cret@127.0.0.1:1/fa", "cannot reach database", COMMANDS),
        ("mysql+aiomysql://fa:s3cret@127.0.0.1/fa", "driver is not installed", [COMMANDS[0], COMMANDS[3]]),
        ("nosuchdialect://fa:s3cret@host/fa", "driver is not installed", [COMMANDS[1]]),
        ("sqlite+aiosqlite:////nonexistent-dir/fa.db", "cannot reach database", [COMMANDS[0]]),
    ],
)
def test_database_failures_are_one_friendly_line(url: str, expected: str, commands: list[tuple[str, ...]]) -> None:
    for cmd in commands:
        out = fa_server(*cmd, "--db", url)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2, (cmd, out.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("fa-server: ") and expected in lines[0], (cmd, out.stderr[-2000:])
        assert "s3cret" not in out.stderr and "Traceback" not in out.stderr


def test_workers_refuse_sqlite_with_the_reason_and_the_alternative(migrated_url: str) -> None:
    out = fa_server("serve", "--workers", "2", "--db", migrated_url)
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.strip().splitlines()
    assert "SQLite allows one writing process" in line and "postgresql+asyncpg://" in line
    bad = fa_server("serve", "--workers", "0", "--db", migrated_url)
    assert bad.returncode == 2 and "--workers: must be between 1 and 64" in bad.stderr


def test_migrate_is_quiet_by_default_and_verbose_on_request(tmp_path) -> None:  # type: ignore[no-untyped-def]
    quiet = fa_server("migrate", "--db", f"sqlite+aiosqlite:///{tmp_path / 'q.db'}")
    assert quiet.returncode == 0, quiet.stderr
    assert "migrated" in quiet.stdout
    assert "alembic" not in quiet.stderr and "INFO" not in quiet.stderr, quiet.stderr
    loud = fa_server("migrate", "--verbose", "--db", f"sqlite+aiosqlite:///{tmp_path / 'v.db'}")
    assert loud.returncode == 0, loud.stderr
    assert "alembic" in loud.stderr, loud.stderr


def test_every_fa_server_option_has_help(monkeypatch: pytest.MonkeyPatch) -> None:
    from analytics_server import cli

    parser = parser_of(cli.main, ["migrate"], monkeypatch)
    assert not options_without_help(parser, "fa-server")
