"""Validity-proof benchmark (`make bench`): device proving time (Python, and the JS SDK's through
device_sdk/js/scripts/bench_validity.mjs), proof bytes and server verification time per device — one proof alone,
and per device in a batch of a cohort's proofs (what the server does) — for a 16-bucket histogram (with and without
distributed noise), 9 sign votes, a FedAvg clipped update of the 9-weight frecency model (each entry within ±U, its
weight in [0, W]), linked feature_stats first moments and a 1,000-entry heavy-hitters round; then a 1,000-device
noisy 16-bucket histogram round (Skellam, ε = 1) over HTTP with proofs and without (scripts/bench_http.py's
machinery). Prints one JSON object.

    python scripts/bench_validity.py [--repeat 5] [--batch 256] [--devices 1000] [--no-http]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
from analytics_server import privacy, validation
from queries.registry import get_kind
from queries.spec import QuerySpec
from secagg.randomness import OsRandom
from secagg.validity import Bits, ProofContext, Signs, Statement, proof_size, prove, verify, verify_batch

CTX = ProofContext(bytes(range(16)), "bench", 0, 1)


def _noisy_statement(buckets: int, t_min: int, max_clients: int) -> tuple[Statement, dict[str, Any]]:
    """The statement the server would give a 16-bucket histogram at ε = 1, δ = 1e-6 (Skellam) and t_min devices."""
    spec = QuerySpec.model_validate({
        "kind": "histogram", "source": "b", "params": {"buckets": [f"b{i}" for i in range(buckets)]},
        "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6, "validation": "proofs"},
        "cohort": {"min_clients": t_min, "max_clients": max_clients},
    })
    kind = get_kind("histogram")
    params = kind.parse_params(spec.params)
    cal = privacy.check_and_calibrate(spec, kind, params, "demo")
    plan = kind.plan_round(params, kind.initial_state(params), 0)
    noise = privacy.round_noise(cal, plan)
    st = validation.round_statement(spec, kind, plan, noise, cal)
    assert st is not None and noise is not None
    return st, {"mechanism": "skellam", "per_device_scale": noise.noise.per_device_scale,
                "encoding_scale": noise.scale, "noise_bound": st.noise_bound}


def _clipped_update() -> tuple[list[int], Statement]:
    """A FedAvg round's clipped update of the 9-weight frecency model (weighting `examples`, default precision): the
    statement the training kind derives from the task, and an in-range vector."""
    from queries.training import frecency

    kind = get_kind("training")
    params = kind.parse_params({**frecency.example_params(rounds=1, eval_every=0), "client": {"lr": 0.1},
                                "server_optimizer": {"name": "fedavg", "lr": 1.0}, "weighting": "examples"})
    plan = kind.plan_round(params, kind.initial_state(params), 0)
    assert plan is not None
    st = kind.validity(plan.typed_task(kind))
    assert st is not None
    values = [((i * 7919) % (2 * seg.high + 1)) - seg.high if seg.low < 0 else seg.high // 2
              for seg in st.segments for i in range(seg.size)]
    return values, st


def _feature_moments() -> tuple[list[int], Statement]:
    """A feature_stats first-moments round over 2 features, at most 100 rows per device: counts and first moments
    with each moment linked to its count (the relations), and a device's in-range vector (50 rows)."""
    kind = get_kind("feature_stats")
    params = kind.parse_params({"features": [{"name": "age", "lower": 0.0, "upper": 100.0},
                                             {"name": "income", "lower": 0.0, "upper": 1e5}],
                                "max_examples_per_device": 100})
    plan = kind.plan_round(params, kind.initial_state(params), 0)
    assert plan is not None
    st = kind.validity(plan.typed_task(kind))
    unit = st.segments[0].high // 100  # type: ignore[union-attr]
    return [50 * unit, 50 * unit, 20 * unit, 45 * unit], st


JS_BENCH = ROOT / "device_sdk" / "js" / "scripts" / "bench_validity.mjs"


def js_proving(cases: list[tuple[str, Statement, list[int], list[int] | None, int]]) -> dict[str, Any]:
    """The same cases proved by the JS SDK (device_sdk/js/scripts/bench_validity.mjs, one Node process): per case the
    median ms, or why it could not run (no Node, SDK not built: `make js`)."""
    if shutil.which("node") is None or not (ROOT / "device_sdk" / "js" / "dist" / "src" / "validity" / "proof.js").exists():
        return {"skipped": "node or the built JS SDK (make js) missing"}
    payload = {"cases": [{"case": n, "statement": st.to_json(), "values": v, "noise": e, "repeat": r}
                         for n, st, v, e, r in cases]}
    run = subprocess.run(["node", str(JS_BENCH)], input=json.dumps(payload), capture_output=True, text=True,
                         cwd=JS_BENCH.parent.parent, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"bench_validity.mjs failed: {run.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(run.stdout)
    return out


def measure(name: str, statement: Statement, values: list[int], noise: list[int] | None, repeat: int,
            batch: int) -> dict[str, Any]:
    """Proving and verifying one proof (median of `repeat`), and the server's cost per device when it verifies a
    cohort's proofs together (`batch` parties' proofs in one `verify_batch`, as the server does with arrivals)."""
    prove_s, verify_s = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        proof, _ = prove(statement, CTX, values, noise, OsRandom())
        t1 = time.perf_counter()
        verify(statement, CTX, proof)
        t2 = time.perf_counter()
        prove_s.append(t1 - t0)
        verify_s.append(t2 - t1)
    contexts = [ProofContext(CTX.session_id, CTX.query_id, CTX.round, party) for party in range(1, batch + 1)]
    items = [(statement, ctx, prove(statement, ctx, values, noise, OsRandom())[0]) for ctx in contexts]
    t0 = time.perf_counter()
    results = verify_batch(items)
    batch_s = time.perf_counter() - t0
    assert all(isinstance(r, bytes) for r in results)
    return {
        "case": name,
        "dim": statement.dim,
        "noise_bound": statement.noise_bound,
        "encoding_scale": statement.encoding_scale,
        "proof_bytes": proof_size(statement),
        "device_prove_ms": round(1e3 * statistics.median(prove_s), 2),
        "server_verify_ms": round(1e3 * statistics.median(verify_s), 2),
        "batch": batch,
        "server_verify_ms_per_device_batched": round(1e3 * batch_s / batch, 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=256, help="proofs per batch for the batched verification figure")
    ap.add_argument("--no-http", action="store_true")
    args = ap.parse_args()
    one = [0] * 16
    one[3] = 1
    st, info = _noisy_statement(16, 1000, 1000)
    noise = [((i * 7) % (2 * st.noise_bound + 1)) - st.noise_bound for i in range(16)]
    update, update_statement = _clipped_update()
    moments, moments_statement = _feature_moments()
    hh = [0] * 1000
    hh[417] = 1
    specs: list[tuple[str, Statement, list[int], list[int] | None, int]] = [
        ("histogram_16_no_noise", Statement((Bits(16, 1),)), one, None, args.repeat),
        ("histogram_16_skellam_eps1_tmin1000", st, one, noise, args.repeat),
        ("sign_votes_9", Statement((Signs(9),)), [1, -1, 0, 1, 1, -1, 0, 0, 1], None, args.repeat),
        ("fedavg_update_9_weights_weighted", update_statement, update, None, args.repeat),
        ("feature_stats_first_moments_2_features_linked", moments_statement, moments, None, args.repeat),
        ("heavy_hitters_1000_one_vote", Statement((Bits(1000, 1),)), hh, None, max(1, args.repeat // 2)),
    ]
    cases = [measure(*spec, batch=args.batch) for spec in specs]
    cases[1]["noise"] = info
    js = js_proving(specs)
    for case in cases:  # the JS SDK's proving time beside Python's, same statement and vector
        got = [c for c in js.get("cases", []) if c["case"] == case["case"]]
        case["device_prove_ms_js"] = got[0]["device_prove_ms"] if got else None
    out: dict[str, Any] = {"per_device": cases, "js": {k: v for k, v in js.items() if k != "cases"}}
    if not args.no_http:
        from scripts.bench_http import one_round

        skellam = {"mechanism": "skellam", "epsilon": 1.0, "delta": 1e-6}
        out["http_histogram_round"] = [one_round(args.devices, False, 2, checkins=False, validation=v, buckets=16, noise=skellam)
                                       for v in ("proofs", "none")]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
