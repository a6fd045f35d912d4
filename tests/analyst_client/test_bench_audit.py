"""scripts/bench_audit.py audits what it says — an honest synthetic log, served from memory page by page through
the real client's parsing — and is part of `make bench`."""

from __future__ import annotations

import json
from pathlib import Path

from analyst_client.audit import audit_log
from scripts import bench_audit

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_run_audits_every_entry_and_head() -> None:
    report = bench_audit.run_one(3000)
    assert report["ok"] and report["entries"] >= 3000 and report["heads"] == (report["entries"] - 1) * 3 // 4 + 1
    assert report["us_per_entry"] > 0 and report["cpu_us_per_entry"] > 0
    assert '"scripts/bench_audit.py"' in (ROOT / "scripts" / "bench.py").read_text()


def test_the_memory_log_is_what_the_audit_checks() -> None:
    memory = bench_audit.MemoryLog(1200)
    path = "/v1/log/entries?start=1000&end=" + str(memory.size)
    page = json.loads(memory.answers[path])
    assert page["entries"][7]["entry"]["type"] == "task"  # entry 1007: a transaction of its own
    page["entries"][7]["entry"]["round"] = 3
    memory.answers[path] = json.dumps(page).encode()
    report = audit_log(bench_audit.BASE, client_class=bench_audit.memory_client(memory))
    assert [(f.code, f.index) for f in report.findings] == [("altered", 1007)]
    assert report.findings[0].message.startswith("entry 1007 altered or removed")
