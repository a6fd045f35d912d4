"""`make bench` section "audit": what `fa audit` costs per log entry as the log grows (docs/transparency.md).

For each size N (10^5 and 10^6 entries) a child process builds an honest synthetic log in memory — per query a
`query` + `charge` transaction, a `task` and a `release` (every tenth query refunded instead of released), over
four sources, one signed head per transaction (so about 0.75 N heads), Ed25519 and RFC 9162 hashing as the
server does — and serves its routes from memory: every page the auditor asks for is JSON bytes prepared
beforehand, so the timing is the auditor's (parsing and validating each page, rebuilding the tree, verifying
every head, walking every entry), not a server's. It then runs `analyst_client.audit.audit_log` once (no
token) and reports wall and CPU seconds, µs per entry and per head, and the audit's peak RSS above the log
held in memory (Linux: VmHWM after resetting it). The audit is linear when µs per entry stays flat from
10^5 to 10^6.

    python -m scripts.bench_audit                 # both sizes, one JSON object on stdout
    python -m scripts.bench_audit --entries 100000 --child   # one size in this process
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from analyst_client.audit import audit_log
from analyst_client.client import AnalystClient
from translog import entries as te
from translog.heads import Signer, TreeHead
from translog.merkle import MerkleTree
from translog.wire import MAX_ENTRIES_PAGE, HeadModel, b64

SIZES = (100_000, 1_000_000)
ORIGIN = "bench.example/fa-log"
SOURCES = ("app.theme", "words", "features", "clicks")
SECAGG = {"n": 60, "degree": 59, "threshold": 41, "threat_model": "active", "graph_seed": "members_root/v1"}
"""A 60-device complete cohort at the safety floor (what `fa audit` checks each task entry against)."""
T0 = 1_764_300_000_000
BASE = "http://bench.invalid"
ROOT = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    print(f"[audit] {msg}", file=sys.stderr, flush=True)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def synthetic_transactions(size: int) -> Iterator[list[dict[str, Any]]]:
    """The honest synthetic log's transactions (each a list of entries, one signed head after each), until the log
    holds at least `size` entries (also the log scripts/bench_log_memory.py stores in a database)."""
    at = T0
    yield [te.budget_entry(te.DEFAULT_SOURCE, 1e6, 0.5, at)]
    n, q = 1, 0
    while n < size:
        qid, source = f"q{q:09d}", SOURCES[q % len(SOURCES)]
        spec = {"kind": "histogram", "name": f"bench {q}", "source": source, "params": {"buckets": ["a", "b", "c"]}}
        at += 1
        txs = [[te.query_entry(qid, source, "histogram", spec, at), te.charge_entry(qid, source, 0.001, 1e-9, at)],
               [te.task_entry(qid, 0, f"c{q:031d}", hashlib.sha256(qid.encode()).digest(), at, SECAGG)]]
        if q % 10 == 9:
            txs.append([te.charge_entry(qid, source, 0.001, 1e-9, at, refund=True)])
        else:
            txs.append([te.release_entry(qid, "succeeded", {"counts": {"a": q, "b": 1, "c": 2}},
                                         {"epsilon": 0.001, "delta": 1e-9}, at)])
        for tx in txs:
            n += len(tx)
            yield tx
        q += 1
        if q % 20_000 == 0:
            log(f"built {n:,} entries …")


class MemoryLog:
    """An honest log of about `size` entries and the answers of its public routes, as JSON bytes by path."""

    def __init__(self, size: int) -> None:
        self.signer = Signer(hashlib.sha256(b"bench-audit/log").digest())
        self.answers: dict[str, bytes] = {}
        tree = MerkleTree()
        page: list[dict[str, Any]] = []
        sizes: list[int] = []
        heads: list[dict[str, Any]] = []
        self.size = 0
        self.heads = 0

        def transaction(entries: list[dict[str, Any]]) -> None:
            for e in entries:
                tree.append(te.entry_leaf_hash(e))
                page.append({"index": tree.size - 1, "entry": e})
            signed = self.signer.sign_head(TreeHead(ORIGIN, tree.size, tree.root(), T0 + tree.size))
            heads.append(HeadModel.of(signed).model_dump())
            sizes.append(tree.size)

        for tx in synthetic_transactions(size):
            transaction(tx)
            if len(page) >= 4 * MAX_ENTRIES_PAGE:
                self._entry_pages(page, final=False)
        self.size = tree.size
        self._entry_pages(page, final=True)
        self._head_pages(sizes, heads)
        self.heads = len(heads)
        key = {"origin": ORIGIN, "public_key": b64(self.signer.public_key), "key_id": self.signer.key_id,
               "previous_keys": [], "witnesses": {}}
        self.answers["/v1/log/key"] = _dumps(key)
        self.answers["/v1/log/head"] = _dumps({"head": heads[-1], "cosignatures": []})

    def _entry_pages(self, page: list[dict[str, Any]], final: bool) -> None:
        """Serialise full pages of `page` (the auditor asks for start = k·1000); the rest stays for later. The
        size each page reports is filled in at the end (a placeholder keeps the bytes)."""
        while len(page) >= MAX_ENTRIES_PAGE or (final and page):
            chunk, page[:] = page[:MAX_ENTRIES_PAGE], page[MAX_ENTRIES_PAGE:]
            start = chunk[0]["index"]
            self.answers[f"entries:{start}"] = _dumps(chunk)

    def _head_pages(self, sizes: list[int], heads: list[dict[str, Any]]) -> None:
        end = self.size + 1
        i = 0
        for start in range(0, end, MAX_ENTRIES_PAGE):
            stop = min(end, start + MAX_ENTRIES_PAGE)
            j = i
            while j < len(sizes) and sizes[j] < stop:
                j += 1
            self.answers[f"/v1/log/heads?start={start}&end={stop}"] = _dumps({"heads": heads[i:j]})
            i = j
        for start in range(0, self.size, MAX_ENTRIES_PAGE):
            stop = min(self.size, start + MAX_ENTRIES_PAGE)
            body = self.answers.pop(f"entries:{start}")
            self.answers[f"/v1/log/entries?start={start}&end={stop}"] = (
                b'{"size":' + str(self.size).encode() + b',"entries":' + body + b"}")

    def answer(self, path: str) -> bytes:
        try:
            return self.answers[path]
        except KeyError:
            raise AssertionError(f"the benchmark's log has no prepared answer for GET {path}") from None


def memory_client(memory: MemoryLog) -> type[AnalystClient]:
    """An AnalystClient whose requests are answered from `memory` (parsed as the real client parses them)."""

    class MemoryClient(AnalystClient):
        def _call_once(self, method: str, path: str, body: Any) -> Any:
            assert method == "GET", method
            return json.loads(memory.answer(path))

    return MemoryClient


def _hwm_kib() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_hwm() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux ≥ 4.0: reset the peak RSS to the current RSS
        return True
    except OSError:
        return False


def run_one(size: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    memory = MemoryLog(size)
    built_s = time.perf_counter() - t0
    log(f"{memory.size:,} entries, {memory.heads:,} heads built in {built_s:.1f} s; auditing …")
    client = memory_client(memory)
    rss_before = _hwm_kib() if _reset_hwm() else None
    cpu0, t0 = time.process_time(), time.perf_counter()
    report = audit_log(BASE, client_class=client)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    peak = _hwm_kib()
    if not report.ok:
        raise RuntimeError(f"the honest synthetic log has findings: {report.findings[:3]}")
    assert report.entries == memory.size and report.heads_checked == memory.heads, (report.entries,
                                                                                  report.heads_checked)
    out = {
        "entries": memory.size,
        "heads": memory.heads,
        "build_s": round(built_s, 1),
        "audit_wall_s": round(wall, 2),
        "audit_cpu_s": round(cpu, 2),
        "us_per_entry": round(wall / memory.size * 1e6, 2),
        "cpu_us_per_entry": round(cpu / memory.size * 1e6, 2),
        "us_per_head": round(wall / memory.heads * 1e6, 2),
        "audit_peak_rss_mib_above_log": round((peak - rss_before) / 1024, 1) if peak and rss_before else None,
        "maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "ok": report.ok,
    }
    log(json.dumps(out))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, action="append", help="log sizes (default 100000 and 1000000)")
    p.add_argument("--child", action="store_true", help="run the one size given in this process")
    args = p.parse_args(argv)
    sizes = args.entries or list(SIZES)
    if args.child:
        print(json.dumps(run_one(sizes[0])))
        return 0
    runs = {}
    for size in sizes:  # each size in its own process: its memory is its own
        proc = subprocess.run([sys.executable, "-m", "scripts.bench_audit", "--child", "--entries", str(size)],
                              cwd=ROOT, capture_output=True, text=True)
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            runs[str(size)] = {"error": f"exit {proc.returncode}", "stderr_tail": proc.stderr[-2000:]}
            continue
        runs[str(size)] = json.loads(proc.stdout.strip().splitlines()[-1])
    sized = [r for r in runs.values() if "us_per_entry" in r]

    def ratio(key: str) -> float | None:  # per-entry cost at the largest size over the smallest: ~1 when linear
        return round(sized[-1][key] / sized[0][key], 2) if len(sized) >= 2 else None

    print(json.dumps({"runs": runs, "us_per_entry": {k: r.get("us_per_entry") for k, r in runs.items()},
                      "cpu_us_per_entry": {k: r.get("cpu_us_per_entry") for k, r in runs.items()},
                      "per_entry_ratio_largest_to_smallest": ratio("us_per_entry"),
                      "cpu_per_entry_ratio_largest_to_smallest": ratio("cpu_us_per_entry"), "cpus": os.cpu_count()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
