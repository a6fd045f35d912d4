"""`make bench` section "translog": what the public transparency log costs (docs/transparency.md).

On a migrated SQLite database, through the server's own `Store`:
- append: one write transaction holding the `log` lock that appends one entry and stores its signed head
  (what a cohort's formation adds: its `task` entry), ms per append, at log sizes 0 → N;
- a query's entries: `query` + `charge` + one `task` per cohort + `release`, appended as the server does
  (4 transactions for a one-round, one-cohort query), ms per query;
- per device: the proof bundle the server builds for one check-in with an assignment (`TransparencyLog.task_proof`: the
  entry, the newest head, inclusion and consistency proofs), ms, at log sizes 1,000 and 20,000;
- the device's added latency: `translog.check.check_task_proof` (parsing the JSON, the inclusion and consistency
  hash paths, one Ed25519 verification), ms, in Python and in the JS SDK (Node, the same proofs:
  device_sdk/js/scripts/bench_translog.mjs), and the bytes the proof adds to the check-in answer;
- the auditor: verifying N heads and rebuilding the tree from N entries, ms per entry.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from analytics_server.db.engine import make_engine, migrate
from analytics_server.db.store import Store
from analytics_server.services import budgets_service
from analytics_server.db.base import epoch_ms
from analytics_server.db.translog_store import LOG_LOCK
from fa_common.clock import SYSTEM_CLOCK
from translog import entries as te
from translog.check import check_task_proof
from translog.heads import key_table, verify_head
from translog.merkle import MerkleTree
from translog.wire import HeadModel, TaskProof

SIZES = (1_000, 20_000)

SECAGG = {"n": 1000, "degree": 786, "threshold": 601, "threat_model": "active", "graph_seed": "members_root/v1"}
"""A task entry's cohort parameters (their size only matters here)."""


def log(msg: str) -> None:
    print(f"[translog] {msg}", file=sys.stderr, flush=True)


async def _append_many(store: Store, n: int, start: int) -> float:
    t0 = time.perf_counter()
    for i in range(start, start + n):
        async with store.db.tx([LOG_LOCK]) as s:
            await store.log.append(s, [te.task_entry(f"q{i // 10}", 0, f"c{i:031d}", hashlib.sha256(str(i).encode()).digest(),
                                                      epoch_ms(SYSTEM_CLOCK), SECAGG)])
    return (time.perf_counter() - t0) / n * 1000


async def run() -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="fa-bench-translog-"))
    url = f"sqlite+aiosqlite:///{tmp / 'log.db'}"
    await asyncio.to_thread(migrate, url)
    store = Store(make_engine(url))
    signer = await store.log.setup(None, "bench/fa-log")
    await budgets_service.log_budget(store, te.DEFAULT_SOURCE, 10.0, 1e-5)
    out: dict = {"database": "sqlite", "sizes": {}}
    js_cases: list[dict] = []
    size = 1
    for target in SIZES:
        log(f"appending to {target} entries …")
        ms = await _append_many(store, target - size, size)
        size = target
        before, _ = await store.log.head()  # what a device saw before the next queries: its stored head
        assert before is not None
        # a query as the server logs it: submit (query + charge), a cohort (task), the release
        t0 = time.perf_counter()
        for k in range(20):
            qid = f"bench{target}-{k}"
            async with store.db.tx([LOG_LOCK]) as s:
                await store.log.append(s, [te.query_entry(qid, "src", "histogram", {"kind": "histogram", "k": k}, epoch_ms(SYSTEM_CLOCK)),
                                            te.charge_entry(qid, "src", 1.0, 1e-7, epoch_ms(SYSTEM_CLOCK))])
            async with store.db.tx([LOG_LOCK]) as s:
                await store.log.append(s, [te.task_entry(qid, 0, f"cq{target}{k:020d}", bytes(32), epoch_ms(SYSTEM_CLOCK), SECAGG)])
            async with store.db.tx([LOG_LOCK]) as s:
                await store.log.append(s, [te.release_entry(qid, "succeeded", {"counts": [k]}, {"epsilon": 1.0}, epoch_ms(SYSTEM_CLOCK))])
        per_query = (time.perf_counter() - t0) / 20 * 1000
        size += 80
        cohort = f"c{size // 2:031d}"
        times, checks, sizes = [], [], []
        wire = ""
        for rep in range(200):  # the device's stored head is the one before the 20 queries (a consistency proof)
            t0 = time.perf_counter()
            proof = await store.log.task_proof(cohort, before.head.size)
            times.append((time.perf_counter() - t0) * 1000)
            assert proof is not None and proof.consistency
            wire = proof.model_dump_json(exclude_none=True)
            sizes.append(len(wire))
            e = proof.entry
            t0 = time.perf_counter()
            check_task_proof(TaskProof.model_validate_json(wire), task_digest=bytes.fromhex(e["task_digest"]), secagg=e["secagg"],
                             query_id=e["query_id"], round=e["round"], cohort_id=e["cohort_id"],
                             log_keys=key_table([signer.public_key]), last=before.head)
            checks.append((time.perf_counter() - t0) * 1000)
        js_cases.append({"case": str(target), "proof": json.loads(wire), "last": HeadModel.of(before).model_dump(),
                         "context": {"task_digest": e["task_digest"], "query_id": e["query_id"], "round": e["round"],
                                     "cohort_id": e["cohort_id"], "log_key": base64.b64encode(signer.public_key).decode()},
                         "repeat": 200})
        out["sizes"][str(target)] = {
            "append_ms": round(ms, 3),
            "query_entries_ms": round(per_query, 3),
            "server_proof_ms_median": round(statistics.median(times[10:]), 3),
            "device_check_ms_median": round(statistics.median(checks[10:]), 3),
            "proof_bytes_median": int(statistics.median(sizes)),
        }
        log(json.dumps(out["sizes"][str(target)]))
    # the auditor: every head verified, the tree rebuilt from every entry
    t0 = time.perf_counter()
    n, entries = 0, []
    while True:
        total, page = await store.log.entries(n, n + 1000)
        entries += [e for _, e in page]
        n += len(page)
        if n >= total:
            break
    tree = MerkleTree(te.entry_leaf_hash(e) for e in entries)
    heads = await store.log.heads(0, 1 << 53)
    keys = key_table([signer.public_key])
    for h in heads:
        verify_head(h, keys)
        assert tree.root(h.head.size) == h.head.root
    audit_ms = (time.perf_counter() - t0) * 1000
    out["audit"] = {"entries": len(entries), "heads": len(heads), "ms_total": round(audit_ms, 1),
                    "ms_per_entry": round(audit_ms / len(entries), 4)}
    await store.engine.dispose()
    os.remove(tmp / "log.db")
    out["js_device"] = js_checks(js_cases)
    return out


JS_BENCH = Path(__file__).resolve().parent.parent / "device_sdk" / "js" / "scripts" / "bench_translog.mjs"


def js_checks(cases: list[dict]) -> dict:
    """The same proofs checked by the JS SDK (one Node process): median ms per size, or why it could not run."""
    if shutil.which("node") is None or not (JS_BENCH.parent.parent / "dist" / "src" / "translog.js").exists():
        return {"skipped": "node or the built JS SDK (make js) missing"}
    run = subprocess.run(["node", str(JS_BENCH)], input=json.dumps({"cases": cases}), capture_output=True, text=True,
                         cwd=JS_BENCH.parent.parent, timeout=600)
    if run.returncode != 0:
        raise RuntimeError(f"bench_translog.mjs failed: {run.stderr[-2000:]}")
    got = json.loads(run.stdout.strip().splitlines()[-1])
    return {"node": got["node"], **{c["case"]: {"device_check_ms_median": c["device_check_ms"]} for c in got["cases"]}}


def main() -> int:
    result = asyncio.run(run())
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
