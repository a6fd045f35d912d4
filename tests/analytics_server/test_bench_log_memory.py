"""scripts/bench_log_memory.py stores what the server would have stored (entries, the tree's nodes, signed heads
under the database's log key), so the server it starts serves honest heads and proofs; and it is part of `make bench`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from analytics_server.db.engine import make_engine
from analytics_server.db.store import Store
from analytics_server.services import budgets_service
from scripts import bench_log_memory
from scripts.bench_audit import ORIGIN
from translog import entries as te
from translog.heads import key_table, verify_head
from translog.merkle import MerkleTree

ROOT = Path(__file__).resolve().parents[2]


async def test_the_bulk_built_log_is_the_one_the_server_appends_to(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    size = await asyncio.to_thread(bench_log_memory.build, path, 2500)
    store = Store(make_engine(f"sqlite+aiosqlite:///{path}"))
    try:
        signer = await store.log.setup(None, ORIGIN)  # the database's key
        assert await budgets_service.log_budget(store, te.DEFAULT_SOURCE, 3.0, 1e-6)  # one append
        assert signer.key_id == store.log.signer.key_id
        total, rows = 0, []
        while total < size + 1:
            n, page = await store.log.entries(total, total + 1000)
            rows += page
            total += len(page)
        tree = MerkleTree(te.entry_leaf_hash(e) for _, e in rows)
        assert tree.size == size + 1 and rows[-1][1]["type"] == "budget"
        heads = await store.log.heads(0, 1 << 53)
        assert len(heads) == (size - 1) * 3 // 4 + 2
        keys = key_table([signer.public_key])
        for h in heads:
            verify_head(h, keys)
            assert h.head.root == tree.root(h.head.size)
        for i in (0, 1, 1023, 1024, size - 1, size):
            assert await store.log.inclusion(i, size + 1) == tree.inclusion_proof(i, size + 1)
            assert await store.log.consistency(i, size + 1) == tree.consistency_proof(i, size + 1)
    finally:
        await store.engine.dispose()
    assert '"scripts/bench_log_memory.py"' in (ROOT / "scripts" / "bench.py").read_text()
