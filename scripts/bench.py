"""`make bench`: runs every benchmark script and prints one JSON object with all their figures.

Each benchmark is a separate process printing JSON; progress goes to stderr. Sections are added here as
the product grows (secure aggregation, HTTP rounds, differential privacy, the utility of releases).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from secagg.crypto import BENCH_EVERY_VERIFY_ENV

ROOT = Path(__file__).resolve().parent.parent


def run_json(args: list[str], label: str) -> dict:
    print(f"[bench] {label} …", file=sys.stderr, flush=True)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return {"label": label, "error": f"exit {proc.returncode}", "stderr_tail": proc.stderr[-2000:]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"[bench] {label}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return out


def secagg_section() -> dict:
    def sa(clients: int, dim: int, dropout: float, graph: str) -> list[str]:
        return ["-m", "secagg.bench", "--clients", str(clients), "--dim", str(dim), "--bits", "32",
                "--dropout", str(dropout), "--graph", graph, "--json"]

    main = run_json(sa(50, 100_000, 0.10, "complete"), "secagg 50 clients x 100k dims, complete, 10% drop after share keys")
    sparse = {n: run_json(sa(n, 10_000, 0.05, "sparse"), f"secagg {n} clients x 10k dims, sparse, 5% drop")
              for n in (200, 500, 1000)}
    scaling = []
    for n, r in sparse.items():
        if "server_total_s" in r:
            scaling.append({
                "clients": n,
                "degree": r["degree"],
                "server_s": r["server_total_s"],
                "server_s_per_n_log2_n": r["server_total_s"] / (n * math.log2(n)),
                "server_s_per_n_squared": r["server_total_s"] / n**2,
            })
    # checking the server: the devices' checks (every peer's key signature, every share opened under the channel bound
    # to the task; with min_verified, member entries beyond the neighbourhood too), side by side in one run
    verify = {
        name: run_json(["-m", "secagg.bench", "--clients", "1000", "--dim", "4", "--bits", "32", "--graph", "sparse",
                        "--json", *extra], f"secagg 1000 clients, task checks {name}")
        for name, extra in (("off", ["--verify", "off"]), ("on", ["--verify", "on"]),
                            ("on_min_verified_300", ["--verify", "on", "--min-verified", "300"]))
    }
    keys = ("client_ms_per_client", "client_signatures_ms_per_client", "server_signatures_ms_per_client", "server_total_s",
            "ok")
    task_checks = {name: {k: r.get(k) for k in keys} for name, r in verify.items()}
    return {"complete_50x100k": main, "sparse_1000x10k": sparse[1000], "sparse_runs": sparse, "server_scaling": scaling,
            "task_checks_1000": task_checks}


def main() -> int:
    os.environ[BENCH_EVERY_VERIFY_ENV] = "1"  # every benchmark process (and fleet) checks signatures as one device does
    report = {"secagg": secagg_section()}
    # flower: our SecAgg against Flower's SecAgg+ (50 x 100k, 10 % dropping), 3 runs each interleaved; builds the
    # gitignored .venv-flower from PyPI the first time, and reports "skipped" with the reason when it cannot
    for name, script in (("flower", "scripts/bench_flower.py"), ("http", "scripts/bench_http.py"), ("floor", "scripts/bench_floor.py"), ("dp", "scripts/bench_dp.py"),
                         ("dp_central", "scripts/bench_dp_central.py"), ("dp_training", "scripts/bench_dp_training.py"),
                         ("utility", "scripts/bench_utility.py"), ("quantiles", "scripts/bench_quantiles.py"), ("translog", "scripts/bench_translog.py"),
                         ("audit", "scripts/bench_audit.py"), ("log_memory", "scripts/bench_log_memory.py"),
                         ("cluster", "scripts/bench_cluster.py"), ("device", "scripts/bench_device.py"),
                         ("validity", "scripts/bench_validity.py"), ("issuer", "scripts/bench_issuer.py"),
                         ("js_device", "scripts/bench_js.py")):
        if (ROOT / script).exists():
            report[name] = run_json(["-m", script.removesuffix(".py").replace("/", ".")], name)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
