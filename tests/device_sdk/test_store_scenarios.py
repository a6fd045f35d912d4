"""LocalStore collections and metadata; scenario registry and determinism."""

from __future__ import annotations

from pathlib import Path

import pytest

from device_sdk.scenarios import SCENARIOS, generate, scenario
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


def test_scenarios_are_seeded_and_extensible() -> None:
    assert {"words", "features", "mixed"} <= set(SCENARIOS)
    assert generate("words", 1, 5) == generate("words", 1, 5)
    assert any(generate("words", 1, i) != generate("words", 2, i) for i in range(5))
    rows = generate("features", 0, 0)["features"]
    assert rows and all(18 <= r["age"] <= 90 for r in rows)
    with pytest.raises(ValueError, match="scenario: unknown"):
        generate("nope", 0, 0)

    @scenario("test_only_constant", "constant data")
    def _const(rng, i):  # type: ignore[no-untyped-def]
        return {"words": ["moon"]}

    try:
        assert generate("test_only_constant", 0, 3) == {"words": ["moon"]}
        with pytest.raises(ValueError, match="twice"):
            scenario("test_only_constant", "again")(_const)
    finally:
        del SCENARIOS["test_only_constant"]
