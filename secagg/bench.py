"""Benchmark: one secure-aggregation session with every party in this process; prints one JSON object.

    python -m secagg.bench --clients 50 --dim 100000 --bits 32 --dropout 0.1 --graph complete --json

`--drop-phase P` names the phase whose message the dropping parties never send. The default,
masked_input, drops them right after the share-keys phase: the costliest case for the server, which must
reconstruct their mask keys and regenerate their pairwise masks. `random` spreads drops over all phases.
Time is split into PRG (mask expansion), key agreement (X25519 + HKDF), Shamir and everything else.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

from secagg.config import SecAggConfig
from secagg.crypto import BENCH_EVERY_VERIFY_ENV, aes_ctr_throughput_probe
from secagg.meter import CostMeter
from secagg.phases import Phase
from secagg.simulate import PROTOCOL_PHASES, expected_sum, protocol_randomness, run_session


def measure_aes_ctr(nbytes: int, min_total: int = 256 << 20) -> float:
    """Raw AES-256-CTR keystream rate (GB/s) on buffers of the size the masks use."""
    reps = max(3, math.ceil(min_total / max(nbytes, 1)))
    start = time.perf_counter()
    total = sum(aes_ctr_throughput_probe(nbytes) for _ in range(reps))
    return total / (time.perf_counter() - start) / 1e9


def choose_drops(n: int, dropout: float, drop_phase: str, rng: np.random.Generator) -> dict[Phase, set[int]]:
    k = int(round(n * dropout))
    chosen = rng.choice(np.arange(1, n + 1), size=k, replace=False).tolist()
    if drop_phase == "random":
        phases = rng.choice(len(PROTOCOL_PHASES), size=k)
        out: dict[Phase, set[int]] = {}
        for p, ph in zip(chosen, phases):
            out.setdefault(PROTOCOL_PHASES[int(ph)], set()).add(int(p))
        return out
    return {Phase[drop_phase.upper()]: {int(p) for p in chosen}}


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    protocol = protocol_randomness(args.protocol_seed)
    cfg = SecAggConfig(
        protocol.child("session-id").bytes(16), args.clients, args.dim, args.bits,
        graph=args.graph, threat_model=args.threat_model,
    )
    inputs = {p: rng.integers(0, 1 << args.bits, args.dim, dtype=np.uint64) for p in range(1, args.clients + 1)}
    drops = choose_drops(args.clients, args.dropout, args.drop_phase, rng)
    client_meter, server_meter = CostMeter(time.perf_counter), CostMeter(time.perf_counter)

    start = time.perf_counter()
    report = run_session(cfg, inputs, drops, time.perf_counter, client_meter, server_meter, protocol,
                         task_digest=protocol.child("task-digest").bytes(32), verify=args.verify == "on",
                         min_verified=args.min_verified)
    total_s = time.perf_counter() - start

    ok = False
    if report.result is not None:
        want = expected_sum(inputs, report.sent_input, args.bits)
        ok = bool(np.array_equal(report.result.vector, want)) and report.result.contributors == report.sent_input

    survivors = [p for p in inputs if not any(p in s for s in drops.values())]
    upload = float(np.mean([report.upload_bytes[p] for p in survivors])) if survivors else 0.0
    payload = args.dim * args.bits / 8

    stacked = np.stack([inputs[p] for p in report.sent_input]) if report.sent_input else np.zeros((1, args.dim))
    t0 = time.perf_counter()
    stacked.sum(axis=0)
    plaintext_sum_s = time.perf_counter() - t0

    secs = {k: client_meter.seconds[k] + server_meter.seconds[k] for k in client_meter.seconds}
    prg_bytes = client_meter.prg_bytes + server_meter.prg_bytes
    aes = measure_aes_ctr(args.dim * cfg.work_dtype.itemsize)
    prg_gbps = prg_bytes / secs["prg"] / 1e9 if secs["prg"] else 0.0
    return {
        "clients": args.clients,
        "dim": args.dim,
        "bits": args.bits,
        "graph": "complete" if cfg.uses_complete_graph else "sparse",
        "degree": cfg.resolved_degree,
        "threshold": cfg.share_threshold,
        "threat_model": args.threat_model,
        "verify": args.verify,
        "min_verified": args.min_verified,
        "client_signatures_ms_per_client": round(1000 * client_meter.seconds["signatures"] / args.clients, 3),
        "server_signatures_ms_per_client": round(1000 * server_meter.seconds["signatures"] / args.clients, 3),
        "client_ms_per_client": round(1000 * sum(report.client_s.values()) / args.clients, 3),
        "dropout": args.dropout,
        "drop_phase": args.drop_phase,
        "dropped": sum(len(s) for s in drops.values()),
        "contributors": len(report.sent_input),
        "client_s": {k: round(v, 4) for k, v in report.client_s.items()},
        "server_s": {k: round(v, 4) for k, v in report.server_s.items()},
        "server_total_s": round(sum(report.server_s.values()), 4),
        "total_s": round(total_s, 4),
        "split_s": {
            "prg": round(secs["prg"], 4),
            "key_agreement": round(secs["key_agreement"], 4),
            "shamir": round(secs["shamir"], 4),
            "signatures": round(secs["signatures"], 4),
            "other": round(total_s - sum(secs.values()), 4),
        },
        "upload_bytes_per_client": round(upload),
        "expansion": round(upload / payload, 4),
        "prg_bytes": prg_bytes,
        "prg_gbps": round(prg_gbps, 3),
        "aes_ctr_gbps": round(aes, 3),
        "prg_floor_s": round(prg_bytes / (aes * 1e9), 4),
        "total_minus_key_agreement_over_prg_floor": round((total_s - secs["key_agreement"]) / (prg_bytes / (aes * 1e9)), 3),
        "plaintext_sum_s": round(plaintext_sum_s, 5),
        "abort": str(report.abort) if report.abort else None,
        "ok": ok,
    }


def main(argv: list[str] | None = None) -> int:
    os.environ[BENCH_EVERY_VERIFY_ENV] = "1"  # its clients share a process: each checks signatures as a device does
    ap = argparse.ArgumentParser(prog="python -m secagg.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--dim", type=int, default=10_000)
    ap.add_argument("--bits", type=int, default=32)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--drop-phase", default="masked_input", choices=["advertise_keys", "share_keys", "masked_input", "unmasking", "random"])
    ap.add_argument("--graph", default="auto", choices=["auto", "complete", "sparse"])
    ap.add_argument("--threat-model", default="semi_honest", choices=["semi_honest", "active"])
    ap.add_argument("--verify", default="on", choices=["on", "off"],
                    help="whether clients verify their peers (key signatures, member entries, consistency signatures; they always sign)")
    ap.add_argument("--min-verified", type=int, default=None,
                    help="clients refuse unless this many distinct members signed (member entries beyond the neighbourhood)")
    ap.add_argument("--protocol-seed", help="seed the session id, keys, self-mask seeds and Shamir coefficients "
                    "(reproducible runs; default: OS entropy)")
    ap.add_argument("--seed", type=int, help="seed of the inputs and the drops", default=0)
    ap.add_argument("--json", action="store_true", help="print compact JSON (the default is indented)")
    args = ap.parse_args(argv)
    if not 0 <= args.dropout < 1:
        ap.error("--dropout must be in [0, 1)")
    result = run(args)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
