"""What every repository shares: the transaction helper (`Database`) with its named locks, the injected clock's
readings as stored timestamps, and the shielding of whole database calls.

Writes are serialised by one asyncio lock: SQLite allows one writer at a time, and the server is a single
process, so this removes "database is locked" retries without costing PostgreSQL anything that matters at this
scale. A transaction may also take named database locks (`Database.tx(locks=…)`: `BEGIN IMMEDIATE` on SQLite,
`SELECT … FOR UPDATE` on the `ledger_locks` rows of the names on PostgreSQL), so that two server processes on one
database cannot both spend the last of a budget or append the same log index.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any, TypeVar, cast

from sqlalchemy import CursorResult, Result, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from analytics_server.db.engine import session_factory
from analytics_server.db.models import LedgerLock
from fa_common.clock import Clock

T = TypeVar("T")


class Database:
    """The engine, its sessions and the write transactions (`tx`) every repository of one process shares."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.sessions: async_sessionmaker[AsyncSession] = session_factory(engine)
        self._write = asyncio.Lock()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def tx(self, locks: Iterable[str] = ()) -> Tx:
        """`async with db.tx(locks) as s:` — a serialised write transaction, committed on success."""
        return Tx(self, tuple(locks))

    def upsert(self) -> Any:
        """The dialect's `insert` (with `on_conflict_do_…`)."""
        return pg_insert if self.dialect == "postgresql" else sqlite_insert


class Tx:
    """`async with db.tx() as session:` — serialised write transaction, committed on success.

    With `locks` (names such as `source:words`, `analyst:7`, `log`) the transaction also holds database locks that
    serialise it against other processes: `BEGIN IMMEDIATE` on SQLite (the database write lock, taken before
    the first read), `SELECT … FOR UPDATE` on each name's `ledger_locks` row on PostgreSQL (sorted, so two
    transactions never wait on each other in opposite orders)."""

    def __init__(self, db: Database, locks: tuple[str, ...] = ()) -> None:
        self.db = db
        self.locks = locks

    async def __aenter__(self) -> AsyncSession:
        await self.db._write.acquire()
        self.session = self.db.sessions()
        try:
            session = await self.session.__aenter__()
            if self.locks:
                await _lock(session, self.db.dialect, self.locks)
        except BaseException:
            await self.session.close()
            self.db._write.release()
            raise
        return session

    async def __aexit__(self, exc_type, exc, tb) -> None:  # type: ignore[no-untyped-def]
        try:
            if exc_type is None:
                await self.session.commit()
            else:
                await self.session.rollback()
        finally:
            await self.session.__aexit__(exc_type, exc, tb)
            self.db._write.release()


async def _lock(session: AsyncSession, dialect: str, names: tuple[str, ...]) -> None:
    if dialect == "sqlite":
        await session.execute(text("BEGIN IMMEDIATE"))
    elif dialect == "postgresql":
        for name in sorted(set(names)):
            await session.execute(pg_insert(LedgerLock).values(name=name).on_conflict_do_nothing())
            await session.execute(select(LedgerLock.name).where(LedgerLock.name == name).with_for_update())
    else:
        raise RuntimeError(f"no ledger lock for database dialect {dialect!r} (supported: sqlite, postgresql)")


def utc(clock: Clock) -> datetime:
    """The clock's wall time as a stored timestamp (timezone-aware UTC)."""
    return datetime.fromtimestamp(clock.time(), timezone.utc)


def epoch_ms(clock: Clock) -> int:
    """The clock's wall time in unix milliseconds (the transparency log's timestamps)."""
    return int(clock.time() * 1000)


def rowcount(res: Result[Any]) -> int:
    """Rows an UPDATE or DELETE matched: `execute` is typed as returning a `Result`, but for these statements
    it is a `CursorResult`, which carries the count."""
    return int(cast(CursorResult[Any], res).rowcount or 0)


def shielded(fn: T) -> T:
    """The coroutine function runs to completion even when its caller is cancelled.

    A query's task is cancelled at whatever it awaits; cancelling a database call half way (aiosqlite runs it in a
    thread) can leave a connection holding SQLite's write lock until it is garbage-collected, and every other
    writer then fails with "database is locked". Shielded, the call finishes (commits or rolls back) and only the
    caller sees the CancelledError."""
    f = cast(Any, fn)

    @functools.wraps(f)
    async def run(*args: Any, **kwargs: Any) -> Any:
        return await asyncio.shield(f(*args, **kwargs))

    return cast(T, run)


C = TypeVar("C", bound=type)


def run_to_completion(cls: C) -> C:
    """`shielded` on every public coroutine method of `cls` that opens its own transaction. Methods that take the
    caller's session (first parameter `s`) run inside a call that is shielded already."""
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") or not inspect.iscoroutinefunction(fn):
            continue
        params = list(inspect.signature(fn).parameters)
        if len(params) > 1 and params[1] == "s":
            continue
        setattr(cls, name, shielded(fn))
    return cls


__all__ = ["Database", "Tx", "epoch_ms", "rowcount", "run_to_completion", "shielded", "utc"]
