"""Migrations 0013 (the log's Merkle tree in `log_nodes`, backfilled from the leaves) and 0014 (the keyset pages'
indexes) upgrade and downgrade cleanly, and the paging statements of analytics_server/db/reports.py are index range
scans on them (SQLite's plan: no full scan, no sort). On PostgreSQL too when FA_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import event, insert, inspect, select, text
from sqlalchemy.engine import Connection

from analytics_server.db.engine import alembic_config, make_engine
from analytics_server.db.models import LogEntry, LogNode
from analytics_server.db.store import Store
from devstack.pg_local import worker_database
from translog import entries as te
from translog.merkle import MerkleTree

PG_URL = os.environ.get("FA_TEST_POSTGRES_URL")
LEAVES = 1000 + 37
"""Past a power of two, not one itself."""
NEW_INDEXES = {("queries", "ix_queries_created_by_created_at"), ("queries", "ix_queries_created_at"),
               ("privacy_charges", "ix_privacy_charges_source_id")}
OLD_INDEXES = {("queries", "ix_queries_created_by"), ("privacy_charges", "ix_privacy_charges_source")}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)] if PG_URL else ["sqlite"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres" and PG_URL:
        url = worker_database(PG_URL)
        command.downgrade(alembic_config(url), "base")
        return url
    return f"sqlite+aiosqlite:///{tmp_path / 'fa.db'}"


def _with(url: str, fn: Callable[[Connection], Any]) -> Any:
    async def run() -> Any:
        engine = make_engine(url)
        try:
            async with engine.begin() as conn:
                return await conn.run_sync(fn)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def _indexes(conn: Connection) -> set[tuple[str, str]]:
    insp = inspect(conn)
    return {(t, ix["name"]) for t in ("queries", "privacy_charges") for ix in insp.get_indexes(t) if ix["name"]}


def test_the_log_tree_is_backfilled_and_both_migrations_go_down_and_up(empty_url: str) -> None:
    cfg = alembic_config(empty_url)
    command.upgrade(cfg, "0012")
    leaves = [te.entry_leaf_hash(te.budget_entry(f"s{i}", 1.0 + i, 0.0, 1_700_000_000_000 + i)) for i in range(LEAVES)]
    _with(empty_url, lambda c: c.execute(insert(LogEntry.__table__), [
        {"idx": i, "type": "budget", "body": "{}", "leaf_hash": h} for i, h in enumerate(leaves)]))
    tree = MerkleTree(leaves)
    want = {(level, i): h for level in range(1, len(tree.levels)) for i, h in enumerate(tree.levels[level])}

    def nodes(c: Connection) -> dict[tuple[int, int], bytes]:
        return {(r.level, r.idx): bytes(r.hash) for r in c.execute(select(LogNode.level, LogNode.idx, LogNode.hash))}

    for _ in range(2):  # up, down, up again
        command.upgrade(cfg, "head")
        assert _with(empty_url, nodes) == want
        assert NEW_INDEXES <= _with(empty_url, _indexes) and not OLD_INDEXES & _with(empty_url, _indexes)
        command.downgrade(cfg, "0012")
        assert "log_nodes" not in _with(empty_url, lambda c: inspect(c).get_table_names())
        assert OLD_INDEXES <= _with(empty_url, _indexes) and not NEW_INDEXES & _with(empty_url, _indexes)
    command.upgrade(cfg, "head")


def test_a_gap_in_the_leaves_stops_the_backfill(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'fa.db'}"
    command.upgrade(alembic_config(url), "0012")
    _with(url, lambda c: c.execute(insert(LogEntry.__table__), [
        {"idx": i, "type": "budget", "body": "{}", "leaf_hash": bytes(32)} for i in (0, 1, 3)]))
    with pytest.raises(RuntimeError, match="entry 2 is missing"):
        command.upgrade(alembic_config(url), "head")


async def test_the_keyset_pages_are_index_range_scans(migrated_url: str) -> None:
    """The statements `query_page` and `charge_page` send (first page and later pages), explained by SQLite."""
    store = Store(make_engine(migrated_url))
    sent: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            sent.append((statement, parameters))

    event.listen(store.engine.sync_engine, "before_cursor_execute", capture)
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    calls: list[tuple[str, str, Callable[[], Awaitable[Any]]]] = [
        ("first", "ix_queries_created_by_created_at", lambda: store.reports.query_page(7, 20)),
        ("after", "ix_queries_created_by_created_at", lambda: store.reports.query_page(7, 20, (at, "q1"))),
        ("first", "ix_queries_created_at", lambda: store.reports.query_page(None, 20)),
        ("after", "ix_queries_created_at", lambda: store.reports.query_page(None, 20, (at, "q1"))),
        ("first", "ix_privacy_charges_source_id", lambda: store.reports.charge_page("words", None, 20)),
        ("after", "ix_privacy_charges_source_id", lambda: store.reports.charge_page("words", None, 20, 99)),
    ]
    try:
        for label, index, call in calls:
            sent.clear()
            await call()
            statement, params = sent[-1]
            async with store.engine.connect() as conn:
                plan = " | ".join(str(r[-1]) for r in (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)))
            assert index in plan, plan
            assert "TEMP B-TREE" not in plan, plan  # no sort: the index gives the order
            assert not re.search(r"SCAN (queries|privacy_charges)\b(?! USING)", plan), plan
            if "after" in label:  # a later page starts at its cursor: a range search, not a walk from the first row
                assert re.search(r"SEARCH (queries|privacy_charges) USING INDEX \S+ \(.*(\(created_at,id\)<\(\?,\?\)|id<\?)", plan), plan
    finally:
        await store.engine.dispose()
