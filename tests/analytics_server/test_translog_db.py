"""The transparency log's Merkle tree kept in the database (issue 47): heads, inclusion and consistency proofs read
from `log_nodes` are byte for byte those of the in-memory reference (`translog.merkle.MerkleTree`), for logs of any
shape (appends of any number of entries, sizes that are not powers of two); the node table holds exactly the tree's
complete subtrees; no process keeps the leaves, so a second process serves what the first appended; a missing node
is an error, never a wrong proof. On PostgreSQL too when FA_TEST_POSTGRES_URL is set (`-m postgres` picks those)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, event, select

from analytics_server.db.engine import make_engine
from analytics_server.db.models import LogNode
from analytics_server.db.store import Store
from analytics_server.db.base import epoch_ms
from analytics_server.db.translog_store import LOG_LOCK, LogTreeError
from fa_common.clock import SYSTEM_CLOCK
from translog import entries as te
from translog.merkle import MerkleTree

SEED = bytes(range(32))


async def _store(url: str) -> Store:
    store = Store(make_engine(url))
    await store.log.setup(SEED, "test/log")
    return store


async def _append(store: Store, batches: list[int]) -> None:
    n = 0
    for k in batches:
        async with store.db.tx([LOG_LOCK]) as s:
            await store.log.append(s, [te.budget_entry(f"s{n + i}", 1.0 + n + i, 0.0, epoch_ms(SYSTEM_CLOCK)) for i in range(k)])
        n += k


async def _reference(store: Store) -> MerkleTree:
    size, rows = await store.log.entries(0, 10_000)
    assert [i for i, _ in rows] == list(range(size))
    return MerkleTree(te.entry_leaf_hash(e) for _, e in rows)


async def _check_all(store: Store, tree: MerkleTree, pairs: list[tuple[int, int]]) -> None:
    """Every head's root, the node table, and the proofs of `pairs` (index or first, size) against `tree`."""
    heads = await store.log.heads(0, 1 << 53)
    assert heads and all(h.head.root == tree.root(h.head.size) for h in heads)
    async with store.sessions() as s:
        stored = {(r.level, r.idx): bytes(r.hash) for r in (await s.execute(select(LogNode))).scalars()}
    assert stored == {(level, i): h for level in range(1, len(tree.levels)) for i, h in enumerate(tree.levels[level])}
    for a, size in pairs:
        if a < size:
            assert await store.log.inclusion(a, size) == tree.inclusion_proof(a, size), (a, size)
        assert await store.log.consistency(a, size) == tree.consistency_proof(a, size), (a, size)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.integers(1, 9), min_size=1, max_size=14), data=st.data())
def test_proofs_from_the_database_are_the_reference_trees(migrated_template: Path, tmp_path: Path,
                                                          batches: list[int], data: st.DataObject) -> None:
    path = tmp_path / f"log-{os.urandom(4).hex()}.db"
    shutil.copyfile(migrated_template, path)
    total = sum(batches)
    pairs = data.draw(st.lists(st.integers(1, total).flatmap(lambda s: st.tuples(st.integers(0, s), st.just(s))),
                               min_size=1, max_size=25))

    async def run() -> None:
        store = await _store(f"sqlite+aiosqlite:///{path}")
        try:
            await _append(store, batches)
            await _check_all(store, await _reference(store), pairs)
        finally:
            await store.engine.dispose()

    asyncio.run(run())


async def test_every_proof_of_a_log_of_odd_shape_and_a_second_process_serving_it(db_url: str) -> None:
    """Appends of 1..7 entries up to 75 (through 64, past powers of two): every inclusion and consistency proof at
    every size matches the reference; another `Store` (another process, which read nothing before) serves the same,
    and appends on top of what the first wrote."""
    first, second = await _store(db_url), await _store(db_url)
    try:
        await _append(first, [1, 2, 3, 1, 7, 5, 4, 1, 6, 2, 3, 7, 7, 7, 1, 1, 1, 5, 6, 5])
        tree = await _reference(first)
        assert tree.size == 75
        pairs = [(a, size) for size in range(1, tree.size + 1) for a in range(0, size + 1, max(1, size // 9))]
        await _check_all(second, tree, pairs)
        await _append(second, [2, 1])  # on top of the first process's appends: the nodes it wrote are the edge
        tree = await _reference(first)
        await _check_all(first, tree, [(i, 78) for i in range(78)] + [(64, 78), (77, 78), (3, 78)])
        proof = await first.log.task_proof("no such cohort", 10)
        assert proof is None
        assert not hasattr(first, "_log_tree") and not any(isinstance(v, MerkleTree) for v in vars(first).values())
    finally:
        await first.engine.dispose()
        await second.engine.dispose()


async def test_a_missing_node_is_an_error_not_a_wrong_proof(db_url: str) -> None:
    store = await _store(db_url)
    try:
        await _append(store, [1] * 8 + [3])
        tree = await _reference(store)
        async with store.db.tx() as s:
            await s.execute(delete(LogNode).where(LogNode.level == 2, LogNode.idx == 0))
        with pytest.raises(LogTreeError, match=r"level 2, index 0"):
            await store.log.inclusion(5, 11)  # needs [0, 4): node (2, 0)
        assert await store.log.inclusion(10, 11) == tree.inclusion_proof(10, 11)  # needs (3, 0), not (2, 0)
        with pytest.raises(LogTreeError):
            async with store.db.tx([LOG_LOCK]) as s:  # an append reads the edge it extends: (3, 0), (1, 4), (0, 10)
                await s.execute(delete(LogNode).where(LogNode.level == 3))
                await store.log.append(s, [te.budget_entry("x", 1.0, 0.0, epoch_ms(SYSTEM_CLOCK))])
        assert (await store.log.entries(0, 100))[0] == 11  # the failed append left nothing
    finally:
        await store.engine.dispose()


async def test_a_proof_reads_by_index_never_by_scanning_the_log(migrated_url: str) -> None:
    """The statements a proof and an append send are index searches (SQLite's plan): their cost does not grow with
    the log (a row-value `IN` list, for one, makes SQLite scan the whole table)."""
    store = await _store(migrated_url)
    sent: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "log_" in statement:
            sent.append((statement, parameters))

    try:
        await _append(store, [5, 7, 9])
        event.listen(store.engine.sync_engine, "before_cursor_execute", capture)
        await store.log.inclusion(5, 21)
        await store.log.consistency(6, 21)
        await _append(store, [1])
        event.remove(store.engine.sync_engine, "before_cursor_execute", capture)
        assert any("log_nodes" in q for q, _ in sent) and any("log_entries" in q for q, _ in sent)
        async with store.engine.connect() as conn:
            for statement, params in sent:
                plan = " | ".join(str(r[-1]) for r in await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params))
                assert not re.search(r"\bSCAN log_", plan), (statement, plan)
    finally:
        await store.engine.dispose()
