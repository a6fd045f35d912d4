"""LocalStore collections and metadata."""

from __future__ import annotations

from pathlib import Path

import pytest

from device_sdk.store import LocalStore, StoreError


def test_store_collections_persist(tmp_path: Path) -> None:
    path = tmp_path / "device.db"
    store = LocalStore(path)
    store.add("words", "moon")
    store.add_many("words", ["sun", "moon"])
    store.add("features", {"age": 31.0})
    store.set_meta("k", "v")
    store.close()
    again = LocalStore(path)
    assert again.rows("words") == ["moon", "sun", "moon"]
    assert again.rows("features") == [{"age": 31.0}]
    assert again.rows("missing") == []
    assert again.collections() == ["features", "words"]
    assert again.get_meta("k") == "v" and again.get_meta("nope") is None
    again.clear("words")
    assert again.rows("words") == []
    again.delete_meta("k")
    assert again.get_meta("k") is None


def test_store_rejects_bad_rows_and_names() -> None:
    store = LocalStore()
    with pytest.raises(StoreError, match="collection"):
        store.add("", 1)
    with pytest.raises(StoreError, match="JSON"):
        store.add("x", {1, 2})
    with pytest.raises(StoreError, match="JSON"):
        store.add("x", float("nan"))
