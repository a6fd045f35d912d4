"""LocalStore: retention by age and row count per collection (stored in the file), opt-out deletes and keeps
deleting, an old store file is upgraded in place, and the SQL file really holds no deleted row."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from device_sdk import LocalStore, StoreError


def _raw_values(path: Path, collection: str) -> list[str]:
    """What the SQLite file holds for a collection, read past the store's API."""
    with sqlite3.connect(path) as db:
        return [v for (v,) in db.execute("SELECT value FROM rows WHERE collection = ?", (collection,))]


def test_retention_by_row_count_keeps_the_newest(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "d.db")
    store.add_many("words", [f"w{i}" for i in range(10)])
    store.set_retention("words", max_rows=3)
    assert store.rows("words") == ["w7", "w8", "w9"]
    store.add("words", "w10")
    assert store.rows("words") == ["w8", "w9", "w10"] and len(_raw_values(tmp_path / "d.db", "words")) == 3
    store.add_many("other", list(range(5)))  # other collections keep everything
    assert store.count("other") == 5


def test_retention_by_age_and_the_default_rule(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "d.db")
    now = time.time()
    store.add("words", "old", at=now - 3 * 86400)
    store.add("words", "recent", at=now - 3600)
    store.add("clicks", "old", at=now - 3 * 86400)
    store.set_retention("words", max_age_s=86400)
    assert store.rows("words") == ["recent"] and _raw_values(tmp_path / "d.db", "words") == ['"recent"']
    assert store.rows("clicks") == ["old"]
    store.set_default_retention(max_age_s=2 * 86400)  # applies to clicks (no rule of its own) at once
    assert store.rows("clicks") == [] and store.retention("clicks").max_age_s == 2 * 86400
    assert store.retention("words").max_age_s == 86400
    reopened = LocalStore(tmp_path / "d.db")  # rules live in the file
    reopened.add("clicks", "older", at=now - 5 * 86400)
    assert reopened.rows("clicks") == []
    reopened.set_retention("words")  # no limits: falls back to the default rule
    assert reopened.retention("words").max_age_s == 2 * 86400


def test_apply_retention_deletes_rows_that_aged_while_unread(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "d.db")
    store.set_retention("words", max_age_s=60)
    store.add("words", "soon old")
    assert store.apply_retention(now=time.time() + 120) == 1
    assert _raw_values(tmp_path / "d.db", "words") == []


@pytest.mark.parametrize("bad", [{"max_age_s": 0}, {"max_age_s": float("nan")}, {"max_rows": 0}, {"max_rows": 1.5},
                                 {"max_rows": True}])
def test_bad_retention_names_the_field(bad: dict[str, object]) -> None:
    with pytest.raises(StoreError, match=next(iter(bad))):
        LocalStore().set_retention("words", **bad)  # type: ignore[arg-type]


def test_opt_out_deletes_the_collection_and_drops_later_rows(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "d.db")
    store.add_many("words", ["moon", "sun"])
    store.add("features", {"age": 31.0})
    assert store.opt_out("words") == 2
    assert store.rows("words") == [] and _raw_values(tmp_path / "d.db", "words") == []
    store.add("words", "star")
    assert store.rows("words") == [] and store.is_opted_out("words") and not store.is_opted_out("features")
    assert store.rows("features") == [{"age": 31.0}] and store.collections() == ["features"]
    assert LocalStore(tmp_path / "d.db").opted_out() == ["words"]
    store.opt_in("words")
    store.add("words", "star")
    assert store.rows("words") == ["star"]


def test_full_opt_out_with_history_forgets_the_device(tmp_path: Path) -> None:
    from device_sdk import DeviceClient

    store = LocalStore(tmp_path / "d.db")
    store.add("words", "moon")
    client = DeviceClient("http://127.0.0.1:9", store)
    key = store.get_meta("device_key")
    assert key is not None
    assert store.opt_out_all(delete_history=True) == 1
    assert store.get_meta("device_key") is None and client.transparency_log() == []
    store.opt_in()
    assert DeviceClient("http://127.0.0.1:9", store).device_id != client.device_id


def test_a_store_file_from_before_retention_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, collection TEXT NOT NULL, value TEXT NOT NULL)")
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO rows (collection, value) VALUES ('words', '\"moon\"')")
    store = LocalStore(path)
    assert store.rows("words") == ["moon"]
    store.set_retention("words", max_age_s=3600)  # upgraded rows count from the upgrade, not from 1970
    assert store.rows("words") == ["moon"]


@settings(max_examples=50, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 100)), max_size=40),
       limit=st.integers(1, 8))
def test_row_limit_property(ops: list[tuple[str, int]], limit: int) -> None:
    """Whatever is added, a collection holds exactly its newest `limit` rows, in order; others are untouched."""
    store = LocalStore()
    store.set_retention("a", max_rows=limit)
    for coll, value in ops:
        store.add(coll, value)
    assert store.rows("a") == [v for c, v in ops if c == "a"][-limit:]
    assert store.rows("b") == [v for c, v in ops if c == "b"]


def test_retention_and_ledger_read_the_injected_clock() -> None:
    """Age-based retention and the contribution log's timestamps follow the store's clock, not the real one:
    a day passes by advancing a manual clock."""
    from device_sdk.ledger import ContributionLedger
    from fa_common.clock import ManualClock

    clock = ManualClock(start=10_000.0)
    store = LocalStore(":memory:", clock=clock)
    store.set_retention("taps", max_age_s=3600)
    store.add("taps", 1)
    clock.advance(1800)
    store.add("taps", 2)
    assert store.rows("taps") == [1, 2]
    clock.advance(1801)
    assert store.rows("taps") == [2]
    ledger = ContributionLedger(store)
    assert ledger.store.clock is clock
