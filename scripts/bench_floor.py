"""What the safety floor costs (`make bench`, section `floor`): the same 1,000-device masked histogram round over
HTTP before and after issue 46 (devices that set their own safety floor), side by side in one run.

"Before" is commit BEFORE (the last one without the floor), built once into the gitignored `.bench/before-<sha>/`
(`git archive` of that commit and its own `make venv`); its rounds run in the semi-honest model (its demo default:
four requests per device) and in the active model (the consistency round: five). "After" is this tree, where every
cohort is active and its degree and threshold come from `secagg.floor.plan` (k = 786, t = 601 at n = 1,000 and the
default dropout allowance, against k = 60 and t = 41 before). Each side's round is `scripts/bench_http.py`'s
`one_round` in that tree (2 `fa-sim` processes, no validity proofs, 80 % of the fleet needed), interleaved
(before, after, before, after) so that a busy machine weighs on both alike. Prints one JSON object: per round the
device requests per device, device CPU per device (the `fa-sim` processes), server CPU per device and the round's
wall time, and the after/before ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "29730f0"
"""The last commit before the safety floor (main on 2026-11-29)."""
FIELDS = ("device_requests_per_device", "device_cpu_ms_per_device", "server_cpu_ms_per_device", "round_wall_s",
          "server_cpu_s", "clients", "status")
ROUND = """
import json, sys
from scripts.bench_http import one_round
env = json.loads(sys.argv[1])
print(json.dumps(one_round(int(sys.argv[2]), False, 2, checkins=False, validation="none", server_env=env)))
"""


def before_tree() -> Path:
    """The BEFORE commit's tree with its own venv (built once)."""
    sha = subprocess.run(["git", "rev-parse", "--short=12", BEFORE], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    tree = ROOT / ".bench" / f"before-{sha}"
    if not (tree / ".venv" / ".installed").exists():
        tree.mkdir(parents=True, exist_ok=True)
        print(f"[bench_floor] building {tree} (git archive {sha}, make venv) …", file=sys.stderr, flush=True)
        with tempfile.TemporaryFile() as tar:
            subprocess.run(["git", "archive", "--format=tar", sha], cwd=ROOT, stdout=tar, check=True)
            tar.seek(0)
            with tarfile.open(fileobj=tar) as archive:
                archive.extractall(tree, filter="data")
        subprocess.run(["make", "--no-print-directory", "venv"], cwd=tree, check=True,
                       stdout=sys.stderr, stderr=sys.stderr)
    return tree


def one(tree: Path, env: dict[str, str], devices: int) -> dict[str, Any]:
    proc = subprocess.run([str(tree / ".venv" / "bin" / "python"), "-c", ROUND, json.dumps(env), str(devices)],
                          cwd=tree, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)})
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}", "stderr_tail": proc.stderr[-2000:]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {k: out.get(k) for k in FIELDS}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=1000)
    args = p.parse_args()
    old = before_tree()
    runs = {"before_semi_honest": (old, {}), "after": (ROOT, {}), "before_active": (old, {"FA_THREAT_MODEL": "active"})}
    rounds: dict[str, dict[str, Any]] = {}
    for name, (tree, env) in runs.items():
        print(f"[bench_floor] {name} …", file=sys.stderr, flush=True)
        rounds[name] = one(tree, env, args.devices)
        print(f"[bench_floor] {name}: {rounds[name]}", file=sys.stderr, flush=True)
    from secagg import floor

    plan = floor.plan(args.devices)
    after = rounds["after"]
    ratios = {}
    for base in ("before_semi_honest", "before_active"):
        b = rounds[base]
        ratios[f"after_over_{base}"] = {
            k: round(after[k] / b[k], 2) if isinstance(after.get(k), (int, float)) and b.get(k) else None
            for k in FIELDS[:4]}
    print(json.dumps({"devices": args.devices, "before_commit": BEFORE,
                      "before_graph": {"degree": 60, "threshold_semi_honest": 31, "threshold_active": 41},
                      "after_graph": {"degree": plan.degree, "threshold": plan.threshold},
                      "rounds": rounds, "ratios": ratios}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
