"""The device's local example store: named collections of JSON rows in one SQLite file (or ":memory:").

`store.add("words", "moon")`, `store.add("features", {"age": 31.0})`, `store.rows("words")`. Every row keeps
the time it was added (`add(..., at=unix_time)` for data that happened earlier).

Retention: `set_retention(collection, max_age_s=…, max_rows=…)` (or `set_default_retention` for every
collection without its own) keeps only the newest rows, and only those younger than the age; rows past it
are deleted when rows are added, when they are read and at every check-in (`apply_retention`). Rules are
stored in the file, so they survive restarts.

Opt-out: `opt_out(collection)` deletes the collection's rows and drops whatever is added to it later until
`opt_in(collection)`; `opt_out_all()` does that for every collection (present and future), and the client
then stops checking in. `delete_history=True` also deletes the device's contribution log and identity.

A small key/value table keeps SDK state such as the device's identity key and id; `transaction()` gives SDK
modules (the contribution ledger) the connection under the store's lock.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fa_common.clock import SYSTEM_CLOCK, Clock

ALL = "*"
"""The opt-out entry that covers every collection."""


class StoreError(ValueError):
    """A collection name, row or setting the store cannot keep."""


@dataclass(frozen=True)
class Retention:
    """How long rows of a collection are kept: the newest `max_rows`, none older than `max_age_s`."""

    max_age_s: float | None = None
    max_rows: int | None = None

    def __post_init__(self) -> None:
        if self.max_age_s is not None and (
            isinstance(self.max_age_s, bool) or not isinstance(self.max_age_s, (int, float))
            or not math.isfinite(self.max_age_s) or self.max_age_s <= 0
        ):
            raise StoreError(f"max_age_s: must be a positive number of seconds or None, got {self.max_age_s!r}")
        if self.max_rows is not None and (isinstance(self.max_rows, bool) or not isinstance(self.max_rows, int) or self.max_rows < 1):
            raise StoreError(f"max_rows: must be a positive integer or None, got {self.max_rows!r}")


class LocalStore:
    def __init__(self, path: str | Path = ":memory:", *, clock: Clock | None = None) -> None:
        """`clock`: where the store, its ledger and the DeviceClient built on it read the time (default the
        system clock; tests pass a `fa_common.clock.ManualClock`)."""
        self.path = str(path)
        self.clock: Clock = clock or SYSTEM_CLOCK
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.RLock()
        with self._lock:
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")  # one fsync per commit, readers never blocked
            self._db.execute("CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, collection TEXT NOT NULL, value TEXT NOT NULL)")
            columns = {r[1] for r in self._db.execute("PRAGMA table_info(rows)")}
            if "created_at" not in columns:  # a store written by an SDK before retention: its rows count from now
                self._db.execute("ALTER TABLE rows ADD COLUMN created_at REAL NOT NULL DEFAULT 0")
                self._db.execute("UPDATE rows SET created_at = ? WHERE created_at = 0", (self.clock.time(),))
            self._db.execute("CREATE INDEX IF NOT EXISTS rows_collection ON rows (collection, id)")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS retention (collection TEXT PRIMARY KEY, max_age_s REAL, max_rows INTEGER)"
            )
            self._db.execute("CREATE TABLE IF NOT EXISTS opted_out (collection TEXT PRIMARY KEY, at REAL NOT NULL)")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The connection under the store's lock, inside one SQLite transaction (committed on success)."""
        with self._lock:
            if self._db.in_transaction:  # nested: part of the caller's transaction
                yield self._db
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @staticmethod
    def _check_name(name: str) -> None:
        if not isinstance(name, str) or not name or len(name) > 128 or name == ALL:
            raise StoreError(f"collection: must be a non-empty string of at most 128 characters (not '*'), got {name!r}")

    # -- rows -----------------------------------------------------------------------------------

    def add(self, collection: str, value: Any, *, at: float | None = None) -> None:
        self.add_many(collection, [value], at=at)

    def add_many(self, collection: str, values: Iterable[Any], *, at: float | None = None) -> None:
        """Add rows (dropped when the collection is opted out); `at`: when they happened (default now)."""
        self._check_name(collection)
        stamp = self.clock.time() if at is None else float(at)
        if not math.isfinite(stamp):
            raise StoreError(f"at: must be a finite unix time, got {at!r}")
        try:
            encoded = [(collection, json.dumps(v, allow_nan=False), stamp) for v in values]
        except (TypeError, ValueError) as exc:
            raise StoreError(f"{collection}: row is not JSON-serialisable ({exc})") from None
        with self.transaction() as db:
            if self._opted_out(db, collection):
                return
            db.executemany("INSERT INTO rows (collection, value, created_at) VALUES (?, ?, ?)", encoded)
            self._prune(db, collection, self.clock.time())

    def rows(self, collection: str) -> list[Any]:
        """The collection's rows in insertion order, after its retention rules are applied."""
        self._check_name(collection)
        with self.transaction() as db:
            self._prune(db, collection, self.clock.time())
            cur = db.execute("SELECT value FROM rows WHERE collection = ? ORDER BY id", (collection,))
            return [json.loads(v) for (v,) in cur.fetchall()]

    def count(self, collection: str) -> int:
        self._check_name(collection)
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM rows WHERE collection = ?", (collection,)).fetchone()[0])

    def collections(self) -> list[str]:
        with self._lock:
            return [c for (c,) in self._db.execute("SELECT DISTINCT collection FROM rows ORDER BY collection")]

    def clear(self, collection: str) -> None:
        """Delete every row of the collection (it stays opted in)."""
        self._check_name(collection)
        with self._lock:
            self._db.execute("DELETE FROM rows WHERE collection = ?", (collection,))

    # -- retention ------------------------------------------------------------------------------

    def set_retention(self, collection: str, *, max_age_s: float | None = None, max_rows: int | None = None) -> None:
        """Keep at most the newest `max_rows` rows of the collection, none older than `max_age_s` (None: no
        limit); applied at once. Both None removes the collection's own rule (the default applies)."""
        self._check_name(collection)
        self._set_rule(collection, Retention(max_age_s, max_rows))

    def set_default_retention(self, *, max_age_s: float | None = None, max_rows: int | None = None) -> None:
        """The retention of every collection without a rule of its own."""
        self._set_rule(ALL, Retention(max_age_s, max_rows))

    def _set_rule(self, key: str, rule: Retention) -> None:
        with self.transaction() as db:
            if rule.max_age_s is None and rule.max_rows is None:
                db.execute("DELETE FROM retention WHERE collection = ?", (key,))
            else:
                db.execute("INSERT OR REPLACE INTO retention (collection, max_age_s, max_rows) VALUES (?, ?, ?)",
                           (key, rule.max_age_s, rule.max_rows))
            for c in ([key] if key != ALL else self._all_collections(db)):
                self._prune(db, c, self.clock.time())

    def retention(self, collection: str) -> Retention:
        """The rule that applies to the collection (its own, else the default, else no limit)."""
        self._check_name(collection)
        with self._lock:
            return self._rule(self._db, collection)

    @staticmethod
    def _rule(db: sqlite3.Connection, collection: str) -> Retention:
        rows: dict[str, tuple[float | None, int | None]] = dict(
            (c, (a, n)) for c, a, n in db.execute(
                "SELECT collection, max_age_s, max_rows FROM retention WHERE collection IN (?, ?)", (collection, ALL)
            )
        )
        age, limit = rows.get(collection, rows.get(ALL, (None, None)))
        return Retention(age, limit)

    def apply_retention(self, now: float | None = None) -> int:
        """Delete every row past its collection's retention; the number deleted."""
        now = self.clock.time() if now is None else now
        with self.transaction() as db:
            return sum(self._prune(db, c, now) for c in self._all_collections(db))

    @staticmethod
    def _all_collections(db: sqlite3.Connection) -> list[str]:
        return [c for (c,) in db.execute("SELECT DISTINCT collection FROM rows")]

    def _prune(self, db: sqlite3.Connection, collection: str, now: float) -> int:
        rule = self._rule(db, collection)
        deleted = 0
        if rule.max_age_s is not None:
            deleted += db.execute(
                "DELETE FROM rows WHERE collection = ? AND created_at < ?", (collection, now - rule.max_age_s)
            ).rowcount
        if rule.max_rows is not None:
            deleted += db.execute(
                "DELETE FROM rows WHERE collection = ? AND id NOT IN "
                "(SELECT id FROM rows WHERE collection = ? ORDER BY id DESC LIMIT ?)",
                (collection, collection, rule.max_rows),
            ).rowcount
        return deleted

    # -- opt-out --------------------------------------------------------------------------------

    def opt_out(self, collection: str) -> int:
        """Delete the collection's rows and drop whatever is added to it later; the number of rows deleted."""
        self._check_name(collection)
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO opted_out (collection, at) VALUES (?, ?)", (collection, self.clock.time()))
            return int(db.execute("DELETE FROM rows WHERE collection = ?", (collection,)).rowcount)

    def opt_out_all(self, delete_history: bool = False) -> int:
        """Delete every collection and drop everything added later (the client stops checking in). With
        `delete_history`, the contribution log and the device's identity go too (it would return as a new
        device). Returns the number of rows deleted."""
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO opted_out (collection, at) VALUES (?, ?)", (ALL, self.clock.time()))
            deleted = int(db.execute("DELETE FROM rows").rowcount)
            if delete_history:
                db.execute("DELETE FROM meta")
                if db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'contributions'").fetchone():
                    db.execute("DELETE FROM contributions")
            return deleted

    def opt_in(self, collection: str | None = None) -> None:
        """Undo `opt_out(collection)`, or with None `opt_out_all` (collection opt-outs stay)."""
        key = ALL if collection is None else collection
        if collection is not None:
            self._check_name(collection)
        with self._lock:
            self._db.execute("DELETE FROM opted_out WHERE collection = ?", (key,))

    def is_opted_out(self, collection: str | None = None) -> bool:
        """Whether the collection (None: the whole device) is opted out."""
        with self._lock:
            if collection is None:
                return self._db.execute("SELECT 1 FROM opted_out WHERE collection = ?", (ALL,)).fetchone() is not None
            return self._opted_out(self._db, collection)

    def opted_out(self) -> list[str]:
        """Collections opted out one by one ('*' when the whole device is)."""
        with self._lock:
            return [c for (c,) in self._db.execute("SELECT collection FROM opted_out ORDER BY collection")]

    @staticmethod
    def _opted_out(db: sqlite3.Connection, collection: str) -> bool:
        return db.execute("SELECT 1 FROM opted_out WHERE collection IN (?, ?)", (collection, ALL)).fetchone() is not None

    # -- SDK state ------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def delete_meta(self, key: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM meta WHERE key = ?", (key,))

    def close(self) -> None:
        with self._lock:
            self._db.close()
