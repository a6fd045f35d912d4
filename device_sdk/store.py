"""The device's local example store: named collections of JSON rows in one SQLite file (or ":memory:").

`store.add("words", "moon")`, `store.add("features", {"age": 31.0})`, `store.rows("words")`. A small
key/value table keeps SDK state such as the device's identity key and id.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class StoreError(ValueError):
    """A collection name or row the store cannot keep."""


class LocalStore:
    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, collection TEXT NOT NULL, value TEXT NOT NULL)")
            self._db.execute("CREATE INDEX IF NOT EXISTS rows_collection ON rows (collection, id)")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    @staticmethod
    def _check_name(name: str) -> None:
        if not isinstance(name, str) or not name or len(name) > 128:
            raise StoreError(f"collection: must be a non-empty string of at most 128 characters, got {name!r}")

    def add(self, collection: str, value: Any) -> None:
        self.add_many(collection, [value])

    def add_many(self, collection: str, values: Iterable[Any]) -> None:
        self._check_name(collection)
        try:
            encoded = [(collection, json.dumps(v, allow_nan=False)) for v in values]
        except (TypeError, ValueError) as exc:
            raise StoreError(f"{collection}: row is not JSON-serialisable ({exc})") from None
        with self._lock:
            self._db.executemany("INSERT INTO rows (collection, value) VALUES (?, ?)", encoded)

    def rows(self, collection: str) -> list[Any]:
        self._check_name(collection)
        with self._lock:
            cur = self._db.execute("SELECT value FROM rows WHERE collection = ? ORDER BY id", (collection,))
            return [json.loads(v) for (v,) in cur.fetchall()]

    def collections(self) -> list[str]:
        with self._lock:
            return [c for (c,) in self._db.execute("SELECT DISTINCT collection FROM rows ORDER BY collection")]

    def clear(self, collection: str) -> None:
        self._check_name(collection)
        with self._lock:
            self._db.execute("DELETE FROM rows WHERE collection = ?", (collection,))

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
