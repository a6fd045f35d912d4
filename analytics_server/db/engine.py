"""Engine creation (SQLite pragmas), Alembic migration from any cwd, and the "is the schema current" check."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine, AsyncSession

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


class NotMigratedError(RuntimeError):
    """The database schema is missing or older than this code."""


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(url: str) -> None:
    """Apply every migration (blocking; call outside a running event loop or in a thread)."""
    command.upgrade(alembic_config(url), "head")


def make_engine(url: str) -> AsyncEngine:
    is_sqlite = url.startswith("sqlite")
    kwargs = {"connect_args": {"timeout": 30}} if is_sqlite else {"pool_size": 10, "max_overflow": 10}
    engine = create_async_engine(url, **kwargs)
    if is_sqlite:

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA journal_mode")  # switching the mode needs a lock another process may hold
            if str(cur.fetchone()[0]).lower() != "wal":  # (then SQLITE_BUSY at once): only switch when needed
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

    return engine


async def settle_driver_threads(timeout_s: float = 2.0) -> None:
    """Wait (keeping the event loop running) until aiosqlite's connection threads have stopped. After a failed
    connect, aiosqlite stops its thread without awaiting it; closing the loop first makes that thread print a
    "Event loop is closed" traceback on the way out. Call before leaving `asyncio.run` in one-shot commands."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while any(t.is_alive() and "_connection_worker_thread" in t.name for t in threading.enumerate()):
        if asyncio.get_running_loop().time() > deadline:
            return
        await asyncio.sleep(0.01)


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


async def check_migrated(engine: AsyncEngine, url: str) -> None:
    """Raise NotMigratedError unless the database is at the newest migration."""
    heads = set(ScriptDirectory.from_config(alembic_config(url)).get_heads())
    async with engine.connect() as conn:
        current = await conn.run_sync(lambda c: set(MigrationContext.configure(c).get_current_heads()))
    if current != heads:
        have = ", ".join(sorted(current)) or "no schema"
        raise NotMigratedError(
            f"database is not migrated (at {have}, code needs {', '.join(sorted(heads))}); "
            "run `fa-server migrate` (or start with `fa-server serve --migrate`)"
        )
