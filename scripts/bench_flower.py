"""Our SecAgg against Flower's SecAgg+, side by side in one run; prints one JSON object (part of `make bench`).

    python -m scripts.bench_flower [--runs 3] [--wire memory|proto]

Both sides run one session of 50 clients × 100,000 entries with every party in one process, 10 % of the clients
dropping after the share-keys phase (they never send their masked vector), on the complete graph:

- Flower: `scripts/flower_secaggplus_driver.py` (see its docstring: Flower's own `SecAggPlusWorkflow` and
  `secaggplus_mod` driven in memory, no gRPC, no simulation engine), run with `.venv-flower`'s interpreter in
  isolated mode (`-I`). This script creates that virtualenv the first time (gitignored; `pip install -c
  scripts/flower-constraints.txt flwr==FLOWER_VERSION`) and reuses it while the pins are unchanged
  (`.venv-flower/.fa-installed` holds their digest and the installed set: a venv changed by hand is rebuilt).
  When it cannot be built (no PyPI, say) the JSON says `skipped` and why, and the exit status is 0.
- ours: `python -m secagg.bench --clients 50 --dim 100000 --bits 32 --dropout 0.1 --drop-phase masked_input
  --graph complete --threat-model active --json` with FA_BENCH_EVERY_VERIFY=1, from this interpreter. It runs
  in a child process of this script (`--secagg-child`) that calls `secagg.bench.main` with those arguments and
  also times the CPU of the span `total_s` covers (the `run_session` call).

The runs alternate (Flower, ours, Flower, ours, …) so that a load change on the machine hits both. Reported per
run: wall time of the whole protocol, every party included (`total_s`), the CPU time of the same span
(`cpu_s`; Flower's Shamir code runs in threads: all of them count) and the child's whole-process CPU (start-up,
inputs, checks included); then medians and the ratios flower / ours per pair (wall and CPU).

What the ratios mean depends on what differs between the two sessions: `setups` in the JSON lists it (threat
model and signatures, cryptography, entries and their width, transport).

Exit 1 if any run of either side failed its correctness check (Flower's unmasked aggregate against the plain sum
of the survivors' vectors; ours `ok`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from secagg.crypto import BENCH_EVERY_VERIFY_ENV

ROOT = Path(__file__).resolve().parent.parent
FLOWER_VERSION = "1.42.0"
FLOWER_PIP = "24.3.1"  # the pip the Makefile pins for .venv
VENV = ROOT / ".venv-flower"
CONSTRAINTS = ROOT / "scripts" / "flower-constraints.txt"
DRIVER = ROOT / "scripts" / "flower_secaggplus_driver.py"
STAMP = VENV / ".fa-installed"
PIP_LOG = VENV / "pip-install.log"
PYPI_PROBE = "https://pypi.org/simple/flwr/"
RUN_TIMEOUT_S = 1800


def log(msg: str) -> None:
    print(f"[bench_flower] {msg}", file=sys.stderr, flush=True)


def venv_python() -> Path:
    return VENV / "bin" / "python"


def pins_digest() -> str:
    return hashlib.sha256(f"{FLOWER_VERSION}\n{FLOWER_PIP}\n".encode() + CONSTRAINTS.read_bytes()).hexdigest()


def pypi_unreachable() -> str | None:
    """Why PyPI cannot be reached, or None if it answers."""
    try:
        with urllib.request.urlopen(PYPI_PROBE, timeout=15) as resp:
            resp.read(1)
        return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def venv_freeze() -> list[str]:
    proc = subprocess.run([str(venv_python()), "-m", "pip", "--disable-pip-version-check", "freeze"],
                          capture_output=True, text=True, check=True)
    return sorted(line.strip() for line in proc.stdout.splitlines() if line.strip())


def pinned() -> list[str]:
    """The constraints file's pins (what a fresh install on CPython 3.11, Linux x86_64 resolves to)."""
    return sorted(line.strip() for line in CONSTRAINTS.read_text().splitlines()
                  if line.strip() and not line.startswith("#"))


def ensure_venv() -> str | None:
    """Creates or reuses .venv-flower with the pinned Flower; returns why it could not, or None.

    Reused while the pins are unchanged and its packages are those it was built with (the stamp holds both);
    anything else, even a package installed into it by hand, rebuilds it."""
    if STAMP.exists() and venv_python().exists():
        digest, *freeze = STAMP.read_text().splitlines()
        if digest == pins_digest() and freeze == venv_freeze():
            return None
    log(f"creating {VENV.name} with flwr=={FLOWER_VERSION} (once; pip's output in {PIP_LOG.relative_to(ROOT)}) …")
    if VENV.exists():
        shutil.rmtree(VENV)
    base = getattr(sys, "_base_executable", sys.executable)  # the interpreter this venv was made from
    subprocess.run([base, "-m", "venv", str(VENV)], check=True, capture_output=True)
    pip = [str(venv_python()), "-m", "pip", "--disable-pip-version-check", "--retries", "2", "--timeout", "30"]
    steps = [[*pip, "install", f"pip=={FLOWER_PIP}"],
             [*pip, "install", "-c", str(CONSTRAINTS), f"flwr=={FLOWER_VERSION}"]]
    with PIP_LOG.open("w") as out:
        for cmd in steps:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
            if proc.returncode != 0:
                tail = PIP_LOG.read_text()[-1500:]
                shutil.rmtree(VENV, ignore_errors=True)
                why = pypi_unreachable()
                if why is not None:
                    return f"PyPI cannot be reached ({PYPI_PROBE}: {why}); Flower {FLOWER_VERSION} not installed"
                return f"pip could not install flwr=={FLOWER_VERSION} into {VENV.name}: {tail}"
    freeze = venv_freeze()
    if freeze != pinned():
        log(f"note: {VENV.name}'s packages differ from {CONSTRAINTS.name} (another platform or Python?): "
            f"{sorted(set(freeze) ^ set(pinned()))}")
    STAMP.write_text("\n".join([pins_digest(), *freeze]) + "\n")
    return None


def run_child(cmd: list[str], env: dict[str, str]) -> tuple[dict[str, Any] | None, float, str]:
    """Runs cmd; returns its last stdout line as JSON (None if it failed), its CPU seconds (user + sys) and stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = None
    lines = proc.stdout.strip().splitlines()
    if lines:
        with contextlib.suppress(json.JSONDecodeError):
            out = json.loads(lines[-1])
    if proc.returncode != 0 and out is not None:
        out.setdefault("ok", False)
    return out, cpu, proc.stderr


def flower_run(args: argparse.Namespace, threshold: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    cmd = [str(venv_python()), "-I", str(DRIVER), "--clients", str(args.clients), "--dim", str(args.dim),
           "--dropout", str(args.dropout), "--threshold", str(threshold), "--wire", args.wire, "--seed", str(args.seed)]
    out, cpu, err = run_child(cmd, env)
    if out is None:
        return {"ok": False, "error": "the Flower driver failed", "stderr_tail": err[-2000:]}
    out["process_cpu_s"] = round(cpu, 3)
    return out


def ours_args(args: argparse.Namespace) -> list[str]:
    return ["--clients", str(args.clients), "--dim", str(args.dim), "--bits", "32", "--dropout", str(args.dropout),
            "--drop-phase", "masked_input", "--graph", "complete", "--threat-model", "active", "--seed",
            str(args.seed), "--json"]


def ours_run(args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, **{BENCH_EVERY_VERIFY_ENV: "1"})
    out, cpu, err = run_child([sys.executable, "-m", "scripts.bench_flower", "--secagg-child", *ours_args(args)], env)
    if out is None:
        return {"ok": False, "error": "secagg.bench failed", "stderr_tail": err[-2000:]}
    out["process_cpu_s"] = round(cpu, 3)
    return out


def secagg_child(argv: list[str]) -> int:
    """`python -m secagg.bench ARGV`, in this process, plus the CPU time of the span its total_s covers."""
    import secagg.bench as sb

    inner = getattr(sb, "run_session")  # what secagg.bench calls between its two clock readings for total_s
    span: dict[str, float] = {}

    def timed_run_session(*a: Any, **kw: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return inner(*a, **kw)
        finally:
            span["wall_s"], span["cpu_s"] = time.perf_counter() - wall, time.process_time() - cpu

    setattr(sb, "run_session", timed_run_session)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = sb.main(argv)
    out = json.loads(buf.getvalue().strip().splitlines()[-1])
    out["cpu_s"] = round(span["cpu_s"], 4) if span else None
    out["command"] = "python -m secagg.bench " + " ".join(argv)
    print(json.dumps(out))
    return rc


FLOWER_KEEP = ("total_s", "cpu_s", "protocol_s", "protocol_cpu_s", "process_cpu_s", "client_total_s", "server_total_s",
               "client_total_cpu_s", "server_total_cpu_s", "contributors", "ok")
OURS_KEEP = ("total_s", "cpu_s", "process_cpu_s", "server_total_s", "contributors", "ok")


def summary(runs: list[dict[str, Any]], keep: tuple[str, ...]) -> dict[str, Any]:
    done = [r for r in runs if "total_s" in r]
    out: dict[str, Any] = {"runs": [{k: r.get(k) for k in keep} | ({"error": r["error"]} if "error" in r else {})
                                    for r in runs]}
    for key in ("total_s", "cpu_s", "process_cpu_s"):
        vals = [r[key] for r in done if r.get(key) is not None]
        out[f"{key}_all"] = vals
        out[f"median_{key}"] = round(statistics.median(vals), 4) if vals else None
    out["ok"] = bool(runs) and all(r.get("ok") is True for r in runs)
    return out


def ratios(flower: list[dict[str, Any]], ours: list[dict[str, Any]], key: str) -> list[float]:
    return [round(f[key] / o[key], 2) for f, o in zip(flower, ours)
            if f.get(key) is not None and o.get(key) and f.get("ok") and o.get("ok")]


def our_threshold(n: int) -> int:
    """Our default reconstruction threshold for n clients on the complete graph, active model (Flower gets the same)."""
    from secagg.config import SecAggConfig

    return SecAggConfig(bytes(16), n, 1, 32, graph="complete", threat_model="active").share_threshold


def setup_notes(args: argparse.Namespace, flower: dict[str, Any], ours: dict[str, Any]) -> dict[str, str]:
    """What differs between the two sessions (a reader must know these to read the ratio)."""
    n = args.clients
    return {
        "modulus": f"both 2^32. Flower masks dim+1 = {flower.get('entries_masked')} int64 entries (its weight factor "
                   "first) whose values have 22 bits (its default quantization_range 2^22: the client quantises its "
                   f"floats inside the protocol); ours masks {args.dim:,} uint32 entries of 32 random bits",
        "threshold": f"both {flower.get('threshold')} of {n} (ours {ours.get('threshold')}: floor(2n/3)+1, its "
                     "default for the active model; Flower's SecAggPlusWorkflow has no default and is given ours)",
        "graph": f"both complete: Flower num_shares = {flower.get('num_shares')} (every client shares with all "
                 "others), ours --graph complete",
        "drop_point": f"both: {flower.get('dropped')} / {ours.get('dropped')} of {n} clients drop after sharing their "
                      "keys and never send a masked vector; the server reconstructs their mask keys and removes "
                      "their pairwise masks",
        "signatures": "ours runs the active threat model: every client signs its keys (Ed25519) and checks every "
                      "sender's signature (FA_BENCH_EVERY_VERIFY=1: no verdict cache), plus the consistency round. "
                      "Flower's SecAgg+ has neither (semi-honest: no signatures, no consistency check)",
        "cryptography": "Flower: ECDH on SECP384R1 with PEM (de)serialisation of keys at each use, Fernet for share "
                        "encryption, Shamir from pycryptodome over GF(2^128) in 16-byte chunks (the PEM private key "
                        "is 20 chunks), masks from numpy's MT19937 seeded with a 32-bit fold of the key (not a "
                        "cryptographic PRG). Ours: X25519 + HKDF, AES-256-GCM share encryption, AES-256-CTR masks, "
                        "Shamir over GF(2^256 + 297) with batched reconstruction",
        "transport": "both in one process without network. Ours encodes every message to bytes (its wire format); "
                     "Flower's messages are "
                     + ("copied as objects (--wire proto serialises them)" if flower.get("wire") == "memory"
                        else "serialised with its protobuf serde"),
        "flower_extras": "Flower's total includes its FL framing (FitIns/FitRes conversions, each client's state "
                         "stored as ConfigRecords between stages) and FedAvg over the unmasked result "
                         "(strategy_aggregate_fit_s, excluded from protocol_s)",
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--secagg-child"]:
        return secagg_child(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m scripts.bench_flower", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each side, interleaved")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--dim", type=int, default=100_000)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--wire", choices=["memory", "proto"], default="memory", help="Flower's transport (see the driver)")
    ap.add_argument("--seed", type=int, default=0, help="seed of both sides' inputs and drops")
    args = ap.parse_args(argv)

    base = {"flower_version": FLOWER_VERSION, "date": datetime.date.today().isoformat(), "cpus": os.cpu_count()}
    try:
        why = ensure_venv()
    except (OSError, subprocess.SubprocessError) as exc:
        why = f"could not create {VENV.name}: {type(exc).__name__}: {exc}"
    if why is not None:
        log(f"skipped: {why}")
        print(json.dumps(base | {"skipped": why}))
        return 0

    threshold = our_threshold(args.clients)
    load_before = os.getloadavg()
    flower: list[dict[str, Any]] = []
    ours: list[dict[str, Any]] = []
    for i in range(args.runs):
        for name, runs in (("flower", flower), ("ours", ours)):
            start = time.perf_counter()
            r = flower_run(args, threshold) if name == "flower" else ours_run(args)
            runs.append(r)
            log(f"run {i + 1}/{args.runs} {name}: total {r.get('total_s')} s, cpu {r.get('cpu_s')} s, ok {r.get('ok')} "
                f"({time.perf_counter() - start:.1f} s with start-up)")
    wall_ratios, cpu_ratios = ratios(flower, ours, "total_s"), ratios(flower, ours, "cpu_s")
    first_f = next((r for r in flower if "total_s" in r), {})
    first_o = next((r for r in ours if "total_s" in r), {})
    flower_summary, ours_summary = summary(flower, FLOWER_KEEP), summary(ours, OURS_KEEP)
    report: dict[str, Any] = base | {
        "flower_version": first_f.get("flower_version", FLOWER_VERSION),
        "clients": args.clients,
        "dim": args.dim,
        "dropout": args.dropout,
        "flower": flower_summary,
        "ours": ours_summary,
        "ratio_median": round(statistics.median(wall_ratios), 2) if wall_ratios else None,
        "ratios": wall_ratios,
        "ratio_min": min(wall_ratios, default=None),
        "ratio_max": max(wall_ratios, default=None),
        "cpu_ratio_median": round(statistics.median(cpu_ratios), 2) if cpu_ratios else None,
        "cpu_ratios": cpu_ratios,
        "flower_env": {"venv": VENV.name, "packages_match_constraints": venv_freeze() == pinned()},
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "flower_detail": {k: first_f.get(k) for k in ("stage_s", "stage_cpu_s", "client_s", "server_s", "threshold",
                                                      "num_shares", "modulus", "quantization_range", "wire",
                                                      "wire_bytes", "strategy_aggregate_fit_s", "dropped",
                                                      "max_rss_mb")},
        "ours_detail": {k: first_o.get(k) for k in ("command", "threshold", "threat_model", "verify", "client_s",
                                                    "server_s", "split_s", "dropped")},
        "setups": setup_notes(args, first_f, first_o),
    }
    print(json.dumps(report))
    ok = flower_summary["ok"] and ours_summary["ok"]
    if not ok:
        log("a run failed its correctness check or did not finish (see flower.runs / ours.runs)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
