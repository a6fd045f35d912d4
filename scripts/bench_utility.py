"""`make bench` section "utility": what a feature_stats release is worth to an analyst.

feature_stats at ε = 1, δ = 1e-6 (Skellam) over 1,000 simulated devices holding 1–3 rows each (the `features`
scenario: age, income, sessions, with the demo's bounds), contribution bound chosen from the data (the
default), t_min = 1,000, RUNS seeded in-process runs (`queries.local_run.run_query`: the server's calibration,
per-device noise shares, decode and post-processing; a new data seed per run). Reported:

- per feature, the count error (released − true number of present values) and the mean's RMSE, against a
  central Gaussian mechanism at the same (ε, δ) (the tight analytic Gaussian, dp_accounting's
  `get_sigma_gaussian`) releasing each feature's count and Σ(x − lower)/range with the same per-device bound
  (the run's chosen bound: L2 sensitivity bound·√(2·features)) — goal: ratio ≤ 2;
- whether any released count or histogram bin was ever negative (bins run as a second configuration);
- how often the 95 % intervals (`uncertainty`) covered the truth, pooled over every noisy value and per
  value type — goal: 93–97 %;
- the bounds the private first step chose.
Prints one JSON object (`--runs N` to change the number of runs).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from dp_accounting.gaussian_mechanism import get_sigma_gaussian

from fleet_sim.scenarios import generate
from queries.local_run import run_query
from queries.registry import get_kind
from queries.uncertainty import describe, value_at
from secagg.randomness import SeededRandom

EPSILON, DELTA, DEVICES = 1.0, 1e-6, 1000
FEATURES = [{"name": "age", "lower": 18.0, "upper": 90.0},
            {"name": "income", "lower": 0.0, "upper": 200000.0},
            {"name": "sessions", "lower": 0.0, "upper": 20.0}]
PRIVACY = {"mechanism": "skellam", "epsilon": EPSILON, "delta": DELTA}


def truth(devices: list[list[dict[str, Any]]], bound: int) -> dict[str, dict[str, float]]:
    """Count, mean and variance of every feature over all rows (clipped to the bounds; devices hold ≤ bound rows
    in this scenario when the bound is ≥ 3 — otherwise the truth is of the full data and clipping shows as error)."""
    out = {}
    for f in FEATURES:
        x = np.array([min(max(r[f["name"]], f["lower"]), f["upper"]) for d in devices for r in d], dtype=np.float64)
        out[f["name"]] = {"count": float(len(x)), "mean": float(x.mean()), "var": float(x.var()),
                          "std": float(x.std()), "sample_var": float(x.var(ddof=1))}
    return out


def run(index: int, bins: int | None) -> dict[str, Any]:
    devices = [generate("features", 1000 + index, i)["features"] for i in range(DEVICES)]
    params: dict[str, Any] = {"features": FEATURES}
    if bins:
        params["bins"] = bins
    lr = run_query(get_kind("feature_stats"), params, devices, privacy=PRIVACY, t_min=DEVICES,
                   rng=np.random.default_rng(index), noise_source=SeededRandom(f"bench_utility/{index}/{bins}".encode()))
    res = lr.result
    uncertainty, _ = describe(lr.release)
    bound = res["contribution_bound"]["max_examples_per_device"]
    t = truth(devices, bound)
    errors, covered, negative = {}, [], False
    for f in FEATURES:
        n = f["name"]
        got = res["features"][n]
        errors[n] = {"count": got["count"] - t[n]["count"], "mean": got["mean"] - t[n]["mean"]}
        negative |= got["count"] < 0 or any(c < 0 for c in got.get("histogram", {}).get("counts", []))
        for key in ("count", "mean", "var", "std", "sample_var"):
            ci = uncertainty.get(f"/features/{n}/{key}", {}).get("ci95")
            if ci is not None:
                covered.append((key, ci[0] <= t[n][key] <= ci[1]))
        if bins:
            edges = got["histogram"]["edges"]
            x = np.array([min(max(r[n], f["lower"]), f["upper"]) for d in devices for r in d])
            true_bins = np.histogram(np.minimum(x, np.nextafter(f["upper"], -math.inf)), bins=edges)[0]
            for b, c in enumerate(true_bins):
                ci = uncertainty[f"/features/{n}/histogram/counts/{b}"]["ci95"]
                covered.append(("bin", ci[0] <= c <= ci[1]))
    assert value_at(res, "/contribution_bound/max_examples_per_device") == bound
    return {"bound": bound, "errors": errors, "covered": covered, "negative": negative, "truth": t}


def central_rmse(runs: list[dict[str, Any]], rng: np.random.Generator, draws: int = 2000) -> dict[str, float]:
    """RMSE of each feature's mean under a central Gaussian at (ε, δ) with the runs' bounds, by simulation over
    the same true data."""
    sigma1 = get_sigma_gaussian(EPSILON, DELTA)  # Δ2 = 1
    out: dict[str, list[float]] = {f["name"]: [] for f in FEATURES}
    for r in runs:
        sigma = sigma1 * r["bound"] * math.sqrt(2 * len(FEATURES))
        for f in FEATURES:
            t = r["truth"][f["name"]]
            rng_ = f["upper"] - f["lower"]
            c, s = t["count"], t["count"] * (t["mean"] - f["lower"]) / rng_
            noisy = f["lower"] + rng_ * np.clip((s + rng.normal(0, sigma, draws)) / np.maximum(c + rng.normal(0, sigma, draws), 1.0), 0, 1)
            out[f["name"]].extend(((noisy - t["mean"]) ** 2).tolist())
    return {k: float(math.sqrt(np.mean(v))) for k, v in out.items()}


def summarise(runs: list[dict[str, Any]], bins: int | None) -> dict[str, Any]:
    central = central_rmse(runs, np.random.default_rng(7))
    per_feature = {}
    for f in FEATURES:
        n = f["name"]
        count_err = np.array([r["errors"][n]["count"] for r in runs])
        mean_err = np.array([r["errors"][n]["mean"] for r in runs])
        rmse = float(np.sqrt(np.mean(mean_err**2)))
        per_feature[n] = {
            "count_rmse": round(float(np.sqrt(np.mean(count_err**2))), 2),
            "count_mean_abs_error": round(float(np.mean(np.abs(count_err))), 2),
            "count_relative_rmse": round(float(np.sqrt(np.mean(count_err**2))) / float(np.mean([r["truth"][n]["count"] for r in runs])), 4),
            "mean_rmse": rmse,
            "mean_rmse_central_gaussian": central[n],
            "mean_rmse_ratio_vs_central": round(rmse / central[n], 3),
        }
    pooled = [c for r in runs for _, c in r["covered"]]
    by_type: dict[str, list[bool]] = {}
    for r in runs:
        for key, c in r["covered"]:
            by_type.setdefault(key, []).append(c)
    bounds: dict[str, int] = {}
    for r in runs:
        bounds[str(r["bound"])] = bounds.get(str(r["bound"]), 0) + 1
    return {
        "bins": bins,
        "runs": len(runs),
        "features": per_feature,
        "worst_mean_rmse_ratio": max(v["mean_rmse_ratio_vs_central"] for v in per_feature.values()),
        "negative_count_or_bin": any(r["negative"] for r in runs),
        "ci95_coverage": round(float(np.mean(pooled)), 4),
        "ci95_values_checked": len(pooled),
        "ci95_coverage_by_value": {k: round(float(np.mean(v)), 4) for k, v in by_type.items()},
        "bounds_chosen": bounds,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args()
    started = time.perf_counter()
    out: dict[str, Any] = {"epsilon": EPSILON, "delta": DELTA, "devices": DEVICES, "rows_per_device": "1-3",
                           "mechanism": PRIVACY["mechanism"]}
    for label, bins in (("feature_stats", None), ("feature_stats_bins4", 4)):
        runs = []
        for i in range(args.runs):
            runs.append(run(i, bins))
            if (i + 1) % 10 == 0:
                print(f"[bench_utility] {label}: {i + 1}/{args.runs} runs", file=sys.stderr, flush=True)
        out[label] = summarise(runs, bins)
    out["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
