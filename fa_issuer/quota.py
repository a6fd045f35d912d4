"""The per-install quota: at most `tokens_per_day` tokens per (app, install) in any rolling 24 hours.

Kept in the issuer's own SQLite file (stdlib sqlite3), so it survives restarts. Each charge is one
`BEGIN IMMEDIATE` transaction (count the install's issuances in the window, then record one), so concurrent
requests — threads of this process or other processes on the same file — cannot exceed the quota.

What is stored is only (app, install, time) per issued token: never the blinded messages, the signatures or
the client's address, so these records cannot link a token to the install it was issued to (docs/issuer.md).
Records older than the window are deleted as charges come in.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from fa_common.ratelimit import retry_after_header

WINDOW_S = 86400.0
BUSY_TIMEOUT_S = 30.0
SCHEMA = """
CREATE TABLE IF NOT EXISTS issuances (
    app TEXT NOT NULL,
    install TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS issuances_by_install ON issuances (app, install, at);
CREATE INDEX IF NOT EXISTS issuances_by_time ON issuances (at);
"""


class QuotaStoreError(Exception):
    """The quota file cannot be opened or used (the message names the file)."""


@dataclass(frozen=True)
class Charge:
    """The outcome of one charge: `granted`, the tokens `used` in the window (this one included when granted), the
    `limit`, and when refused the seconds until the oldest issuance in the window leaves it (`retry_after_s`).
    `record` identifies a granted charge for `refund`."""

    granted: bool
    used: int
    limit: int
    retry_after_s: float = 0.0
    record: int | None = None

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)

    def retry_after_header(self) -> str:
        return retry_after_header(self.retry_after_s)


class QuotaStore:
    """The issuance records in one SQLite file. Thread-safe (one connection behind a lock); several
    processes may share the file (the transaction serialises them)."""

    def __init__(self, path: Path | str, tokens_per_day: int, window_s: float = WINDOW_S) -> None:
        if tokens_per_day < 1:
            raise ValueError("tokens_per_day must be at least 1")
        self.path = Path(path)
        self.limit = tokens_per_day
        self.window_s = window_s
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            self._db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise QuotaStoreError(f"cannot use the issuer database {self.path}: {exc}") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def charge(self, app: str, install: str, now: float) -> Charge:
        """Record one token for (app, install) at `now` unless the window already holds `limit` of them."""
        since = now - self.window_s
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM issuances WHERE app = ? AND install = ? AND at <= ?", (app, install, since))
                used, oldest = db.execute(
                    "SELECT COUNT(*), MIN(at) FROM issuances WHERE app = ? AND install = ? AND at > ?",
                    (app, install, since),
                ).fetchone()
                if used >= self.limit:
                    db.execute("COMMIT")
                    return Charge(False, used, self.limit, retry_after_s=max(0.0, oldest + self.window_s - now))
                cur = db.execute("INSERT INTO issuances (app, install, at) VALUES (?, ?, ?)", (app, install, now))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return Charge(True, used + 1, self.limit, record=cur.lastrowid)

    def refund(self, charge: Charge) -> None:
        """Take back a granted charge whose token was not issued (the signing step failed)."""
        if charge.record is None:
            return
        with self._lock:
            self._db.execute("DELETE FROM issuances WHERE rowid = ?", (charge.record,))

    def used(self, app: str, install: str, now: float) -> int:
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*) FROM issuances WHERE app = ? AND install = ? AND at > ?", (app, install, now - self.window_s)
            ).fetchone()
        return int(row[0])

    def prune(self, now: float) -> int:
        """Delete every record older than the window; the number deleted."""
        with self._lock:
            cur = self._db.execute("DELETE FROM issuances WHERE at <= ?", (now - self.window_s,))
        return cur.rowcount

    def columns(self) -> list[str]:
        """The stored columns (tests check that nothing linkable is kept)."""
        with self._lock:
            return [row[1] for row in self._db.execute("PRAGMA table_info(issuances)")]
