"""`make bench` section "log_memory": a server process's memory does not grow with the transparency log (issue 47).

For each size N (10^5 and 10^6 entries) a fresh SQLite database is migrated and filled with the honest synthetic
log of scripts/bench_audit.py — entries, the Merkle tree's nodes (`log_nodes`) and one signed head per transaction,
as the server writes them, but in bulk inserts (no HTTP, no per-append transaction) — under a log key stored in the
database. Then a real `fa-server serve` process starts on it (its start appends the default budget's entry: one
append at size N) and serves the log's newest head, a page of entries, and PROOFS random inclusion and consistency
proofs under the newest head, each checked here (RFC 9162). Reported per size: the server's resident memory (VmRSS)
after serving and its peak (VmHWM), the build time, and the proofs' median latency over HTTP; then the ratio of the
RSS at the largest size to that at the smallest (~1.0 when memory does not grow with the log).

    python -m scripts.bench_log_memory                     # both sizes, one JSON object on stdout
    python -m scripts.bench_log_memory --entries 20000     # other sizes
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from analytics_server.db.engine import migrate
from devstack.processes import Server
from scripts.bench_audit import ORIGIN, T0, synthetic_transactions
from translog import entries as te
from translog.heads import Signer, TreeHead
from translog.merkle import CompactRange, leaf_hash, verify_consistency, verify_inclusion

SIZES = (100_000, 1_000_000)
PROOFS = 200
FLUSH = 50_000
"""Rows kept in memory before an executemany."""
SEED = bytes(range(32))


def log(msg: str) -> None:
    print(f"[log_memory] {msg}", file=sys.stderr, flush=True)


def build(path: Path, size: int) -> int:
    """Migrate `path` and store the synthetic log of about `size` entries; returns its size."""
    migrate(f"sqlite+aiosqlite:///{path}")
    signer = Signer(SEED)
    db = sqlite3.connect(path)
    db.execute("PRAGMA synchronous=OFF")
    db.execute("INSERT INTO log_keys (name, seed) VALUES ('log', ?)", (SEED,))
    edge = CompactRange()
    entries: list[tuple[Any, ...]] = []
    nodes: list[tuple[int, int, bytes]] = []
    heads: list[tuple[Any, ...]] = []

    def flush() -> None:
        db.executemany("INSERT INTO log_entries (idx, type, query_id, cohort_id, body, leaf_hash) VALUES (?, ?, ?, ?, ?, ?)",
                       entries)
        db.executemany("INSERT INTO log_nodes (level, idx, hash) VALUES (?, ?, ?)", nodes)
        db.executemany("INSERT INTO log_heads (size, root, timestamp_ms, origin, key_id, signature) VALUES (?, ?, ?, ?, ?, ?)",
                       heads)
        db.commit()
        for rows in (entries, nodes, heads):
            rows.clear()

    for tx in synthetic_transactions(size):
        for e in tx:
            body = te.canonical(e)
            h = leaf_hash(body)
            entries.append((edge.size, e["type"], e.get("query_id"), e.get("cohort_id"), body.decode(), h))
            nodes.extend(edge.append(h))
        signed = signer.sign_head(TreeHead(ORIGIN, edge.size, edge.root(), T0 + edge.size))
        heads.append((edge.size, signed.head.root, signed.head.timestamp_ms, ORIGIN, signed.key_id, signed.signature))
        if len(entries) >= FLUSH:
            flush()
    flush()
    db.close()
    return edge.size


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def _proc_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def _timed(url: str) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = _get(url)
    return out, (time.perf_counter() - t0) * 1000


def run_one(size: int, tmp: Path) -> dict[str, Any]:
    path = tmp / f"log-{size}.db"
    t0 = time.perf_counter()
    n = build(path, size)
    built_s = time.perf_counter() - t0
    log(f"{n:,} entries stored in {built_s:.1f} s ({path.stat().st_size / 2**20:.0f} MiB); starting the server …")
    server = Server(f"sqlite+aiosqlite:///{path}", tmp / f"server-{size}.log", env={"FA_LOG_ORIGIN": ORIGIN}).start()
    try:
        assert server.proc is not None
        pid = server.proc.pid
        rss_started = _proc_kib(pid, "VmRSS")
        head, head_ms = _timed(f"{server.url}/v1/log/head")
        size_now = head["head"]["size"]
        root = base64.b64decode(head["head"]["root"])
        assert size_now == n + 1, (size_now, n)  # the server's start logged its default budget: one append at n
        _get(f"{server.url}/v1/log/entries?start={size_now - 1000}&end={size_now}")
        rng = random.Random(size)
        inclusion, consistency = [], []
        for _ in range(PROOFS):
            i = rng.randrange(size_now)
            entry = _get(f"{server.url}/v1/log/entries?start={i}&end={i + 1}")["entries"][0]["entry"]
            proof, ms = _timed(f"{server.url}/v1/log/proof/inclusion?index={i}&size={size_now}")
            verify_inclusion(te.entry_leaf_hash(entry), i, size_now, [base64.b64decode(h) for h in proof["proof"]], root)
            inclusion.append(ms)
            first = rng.randrange(1, size_now)
            old = _get(f"{server.url}/v1/log/heads?start={first}&end={first + 1}")["heads"]
            if old:
                proof, ms = _timed(f"{server.url}/v1/log/proof/consistency?first={first}&second={size_now}")
                verify_consistency(first, size_now, base64.b64decode(old[0]["root"]), root,
                                   [base64.b64decode(h) for h in proof["proof"]])
                consistency.append(ms)
        out = {
            "entries": size_now,
            "build_s": round(built_s, 1),
            "database_mib": round(path.stat().st_size / 2**20, 1),
            "server_rss_mib_started": round(rss_started / 1024, 1),
            "server_rss_mib": round(_proc_kib(pid, "VmRSS") / 1024, 1),
            "server_peak_rss_mib": round(_proc_kib(pid, "VmHWM") / 1024, 1),
            "head_ms": round(head_ms, 2),
            "inclusion_ms_median": round(statistics.median(inclusion), 2),
            "consistency_ms_median": round(statistics.median(consistency), 2),
            "proofs_checked": len(inclusion) + len(consistency),
        }
    finally:
        server.stop()
        path.unlink(missing_ok=True)
    log(json.dumps(out))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, action="append", help="log sizes (default 100000 and 1000000)")
    args = p.parse_args(argv)
    sizes = args.entries or list(SIZES)
    with tempfile.TemporaryDirectory(prefix="fa-bench-logmem-") as tmp:
        runs = {str(s): run_one(s, Path(tmp)) for s in sizes}
    first, last = runs[str(sizes[0])], runs[str(sizes[-1])]
    print(json.dumps({
        "runs": runs,
        "rss_mib": {k: r["server_rss_mib"] for k, r in runs.items()},
        "rss_ratio_largest_to_smallest": round(last["server_rss_mib"] / first["server_rss_mib"], 3),
        "peak_rss_ratio_largest_to_smallest": round(last["server_peak_rss_mib"] / first["server_peak_rss_mib"], 3),
        "inclusion_ms_median": {k: r["inclusion_ms_median"] for k, r in runs.items()},
        "consistency_ms_median": {k: r["consistency_ms_median"] for k, r in runs.items()},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
