"""Wake-ups between server processes: PostgreSQL `LISTEN/NOTIFY`, or in-process callbacks on SQLite.

Channels: `fa_assign` (payload: a cohort id whose members' assignments were just stored; every process wakes
the long-polls it holds for them) and `fa_cancel` (payload: a query id cancelled at some process; its lease
holder stops it). Notifications are hints only: a missed one costs latency, never correctness, because the
device pool also polls the database for its waiters and leases are renewed against the database.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import make_url

log = logging.getLogger(__name__)
ASSIGN = "fa_assign"
CANCEL = "fa_cancel"
RECONNECT_S = 1.0

Callback = Callable[[str], None]


class Notifier:
    """In-process notifier (the single-process SQLite server); the base of the PostgreSQL one."""

    shared = False
    """Whether other processes receive what this one publishes."""

    def __init__(self) -> None:
        self._subs: dict[str, list[Callback]] = {}

    def subscribe(self, channel: str, callback: Callback) -> None:
        self._subs.setdefault(channel, []).append(callback)

    def _dispatch(self, channel: str, payload: str) -> None:
        for cb in self._subs.get(channel, []):
            try:
                cb(payload)
            except Exception:  # a subscriber's bug must not stop the others
                log.exception("notification handler for %s failed", channel)

    async def start(self) -> None:
        pass

    async def publish(self, channel: str, payload: str) -> None:
        asyncio.get_running_loop().call_soon(self._dispatch, channel, payload)

    async def stop(self) -> None:
        pass


class PostgresNotifier(Notifier):
    """One dedicated asyncpg connection LISTENs on every subscribed channel and sends NOTIFYs; it reconnects
    in the background when the connection drops (meanwhile notifications are lost: see the module doc)."""

    shared = True

    def __init__(self, db_url: str) -> None:
        super().__init__()
        url = make_url(db_url).set(drivername="postgresql")
        self._dsn = url.render_as_string(hide_password=False)
        self._conn: Any = None
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()

    async def start(self) -> None:
        await self._connect()
        self._task = asyncio.create_task(self._keep_connected(), name="pg-notify")

    async def _connect(self) -> None:
        import asyncpg

        conn = await asyncpg.connect(self._dsn, timeout=10)
        for channel in self._subs:
            await conn.add_listener(channel, self._on_notify)
        conn.add_termination_listener(lambda _c: self._lost.set())
        self._conn = conn
        self._lost.clear()

    def _on_notify(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        self._dispatch(channel, payload)

    async def _keep_connected(self) -> None:
        while True:
            await self._lost.wait()
            self._conn = None
            log.warning("LISTEN connection to PostgreSQL lost; reconnecting")
            while self._conn is None:
                try:
                    await self._connect()
                except Exception as exc:
                    log.warning("LISTEN reconnect failed: %s", exc)
                    await asyncio.sleep(RECONNECT_S)

    async def publish(self, channel: str, payload: str) -> None:
        conn = self._conn
        if conn is None:
            return  # reconnecting: the receivers' polling covers it
        try:
            await conn.execute("SELECT pg_notify($1, $2)", channel, payload)
        except Exception as exc:
            log.warning("NOTIFY %s failed: %s", channel, exc)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._conn is not None:
            try:
                await self._conn.close(timeout=2)
            except Exception:
                pass


def notifier_for(db_url: str) -> Notifier:
    return PostgresNotifier(db_url) if db_url.startswith("postgresql") else Notifier()
