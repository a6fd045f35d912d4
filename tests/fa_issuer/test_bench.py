"""scripts/bench_issuer.py measures what it says (a short run, in process) and is part of `make bench`."""

from __future__ import annotations

from pathlib import Path

from scripts import bench_issuer

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_run_reports_every_cost() -> None:
    report = bench_issuer.run(3)
    assert report["tokens"] == 3 and report["token_bytes"] == 354
    for name in ("issuer_blind_sign_cpu", "issuer_admission_cpu", "device_request_and_finalize", "verify"):
        assert 0 < report[name]["median_ms"] <= report[name]["max_ms"], name
    assert report["issuer_admission_cpu"]["mean_ms"] >= report["issuer_blind_sign_cpu"]["mean_ms"] * 0.5
    assert '"scripts/bench_issuer.py"' in (ROOT / "scripts" / "bench.py").read_text()
