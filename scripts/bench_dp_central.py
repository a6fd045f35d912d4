"""`make bench` section "dp_central": the product's error against a central Gaussian mechanism at equal (ε, δ) and
per-device bound, over ≥ 100 repetitions, for histogram counts and feature means.

Histogram counts (ε = 1, δ = 1e-6, one vote per device, t_min = min_clients = 100): cohorts of 100, 200 and 400
devices. Each repetition draws every device's noise share with the device SDK's sampler, sized for the cohort
(`queries.dp.cohort_noise`, the default dropout allowance) and, for contrast, for t_min alone (the sizing before
cohort-sized noise); the error is the summed noise over the encoding scale, per bucket. Central: the tight analytic
Gaussian (Balle–Wang, dp_accounting) for the same (ε, δ) and L2 sensitivity 1.

Feature means (the audit's workload: 400 devices holding 1–3 rows, ε = 2, δ = 1e-6, two features, at most 3 rows
per device, t_min = 100): `queries.local_run.run_query` runs the feature_stats kind in process exactly as the server
plans and noises it (all three rounds, post-processing included); the error is the released mean against the true
mean over the contributors' rows, at the default budget split and with `means_share` 0.85 (an analyst who wants
the means most; the variances' RMSE is reported beside it). Central: one Gaussian release of (row count, Σ (x − lower)/(upper − lower) per
feature) with the whole (ε, δ) — each device moves every coordinate by at most 3, so the L2 sensitivity is 3·√(1 + F)
— and mean = lower + (upper − lower)·sum/count (the audit's baseline, `ratio`); and the stronger central baseline
that centres as the product does, Σ (2·(x − lower)/(upper − lower) − 1) with the same sensitivity and mean = mid +
(upper − lower)/2·sum/count (`ratio_to_centred`). Neither spends anything on variances, which feature_stats also
releases; the third central baseline does the same job (`ratio_to_same_job`): one Gaussian release of the count, the
centred sums and the centred squares ((2·(x − lower)/(upper − lower) − 1)², for the variances) with the whole budget,
L2 sensitivity 3·√(1 + 2F).

Interval coverage near the release threshold: for a 16-bucket histogram round (ε = 1, cohort of 400, the product's
noise and threshold), noisy counts c + N drawn conditioned on reaching the threshold τ (inverse-CDF sampling of the
Skellam law), for true counts from 0 to τ + 3σ; the share of released counts whose 95 % interval covers c, for the
release-conditional interval the product reports (`queries.selective`) and for the plain value ± 1.96·σ.

Preview against realized: `POST /v1/queries/preview`'s planner (`analytics_server.preview.build`) for the same
specs (min_clients = 100, max_clients = the cohort): the histogram's realized RMSE over the preview's std, and for the
feature means whether the realized RMSE lies in the preview's `std_range` (its std is at min_clients with every
device holding the full bound; the range spans cohort sizes and rows per device).

Hardened TrieHH recall@50 over ε (`triehh_recall`).

Prints one JSON object: RMSE and ratio (product / central) per case, the coverage table, the preview ratios, the
TrieHH recall curve.
"""

from __future__ import annotations

import json
import math
import sys
import time

import numpy as np
from dp_accounting.gaussian_mechanism import get_sigma_gaussian

from queries import dp
from queries.local_run import run_query
from queries.registry import get_kind
from queries.spec import DEFAULT_DROPOUT_ALLOWANCE
from secagg.randomness import SeededRandom

DELTA = 1e-6
T_MIN = 100
REPS = 100
BUCKETS = 16
FEATURES = [{"name": "age", "lower": 18.0, "upper": 90.0}, {"name": "score", "lower": 0.0, "upper": 10.0}]
MAX_ROWS = 3


def histogram_counts(cohort: int, reps: int) -> dict[str, object]:
    kind = get_kind("histogram")
    params = kind.parse_params({"buckets": [f"b{i}" for i in range(BUCKETS)], "max_contributions_per_device": 1})
    plan = kind.plan_round(params, kind.initial_state(params), 0)
    assert plan is not None
    cal = dp.calibrate_query("skellam", 1.0, DELTA, 1, T_MIN)
    t_c = dp.cohort_threshold(T_MIN, cohort, DEFAULT_DROPOUT_ALLOWANCE)
    planned = dp.plan_noise(cal, plan, t_c)
    sized = {"cohort": dp.cohort_noise(cal, plan, planned, t_c), "t_min": planned}
    rng = SeededRandom(f"bench-dp-central-{cohort}".encode())
    errors: dict[str, list[np.ndarray]] = {k: [] for k in sized}
    for name, noise in sized.items():
        for _ in range(reps):
            total = np.zeros(plan.dim, dtype=np.int64)
            for _ in range(cohort):
                total += np.asarray(dp.sample_noise("skellam", noise.noise.per_device_scale, plan.dim, rng), dtype=np.int64)
            errors[name].append(noise.unscale(total).astype(np.float64))
    central = get_sigma_gaussian(1.0, DELTA)
    out: dict[str, object] = {"cohort": cohort, "t_min": T_MIN, "shares_sized_for": t_c, "repetitions": reps,
                              "central_sigma": round(central, 4)}
    for name, errs in errors.items():
        rmse = float(np.sqrt(np.mean(np.square(np.concatenate(errs)))))
        out[f"rmse_{name}_sized"] = round(rmse, 4)
        out[f"ratio_{name}_sized"] = round(rmse / central, 4)
    return out


def _devices(rng: np.random.Generator, n: int) -> list[list[dict[str, float]]]:
    return [[{"age": float(np.clip(rng.normal(40, 12), 18, 90)), "score": float(rng.uniform(2, 6))}
             for _ in range(int(rng.integers(1, MAX_ROWS + 1)))] for _ in range(n)]


def feature_means(devices_n: int, epsilon: float, reps: int, means_share: float | None = None) -> dict[str, object]:
    kind = get_kind("feature_stats")
    privacy = {"mechanism": "skellam", "epsilon": epsilon, "delta": DELTA}
    sigma = get_sigma_gaussian(epsilon, DELTA) * MAX_ROWS * math.sqrt(1 + len(FEATURES))
    noise_rng = SeededRandom(b"bench-dp-central-means")
    product: dict[str, list[float]] = {f["name"]: [] for f in FEATURES}
    central: dict[str, list[float]] = {f["name"]: [] for f in FEATURES}
    centred: dict[str, list[float]] = {f["name"]: [] for f in FEATURES}
    same_job: dict[str, list[float]] = {f["name"]: [] for f in FEATURES}
    sigma_same_job = get_sigma_gaussian(epsilon, DELTA) * MAX_ROWS * math.sqrt(1 + 2 * len(FEATURES))
    variance: dict[str, list[float]] = {f["name"]: [] for f in FEATURES}
    data_rng = np.random.default_rng(7)
    for r in range(reps):
        devices = _devices(data_rng, devices_n)
        params: dict[str, object] = {"features": FEATURES, "max_examples_per_device": MAX_ROWS}
        if means_share is not None:
            params["means_share"] = means_share
        run = run_query(kind, params, devices, privacy=privacy, t_min=T_MIN, rng=np.random.default_rng(r),
                        noise_source=noise_rng)
        count = sum(len(d) for d in devices)
        noisy_count = count + data_rng.normal(0, sigma)
        count_same_job = count + data_rng.normal(0, sigma_same_job)
        for f in FEATURES:
            x = np.array([row[f["name"]] for d in devices for row in d])
            truth = float(x.mean())
            product[f["name"]].append(run.result["features"][f["name"]]["mean"] - truth)
            variance[f["name"]].append(run.result["features"][f["name"]]["var"] - float(x.var()))
            width = f["upper"] - f["lower"]
            noisy_sum = float(((x - f["lower"]) / width).sum()) + data_rng.normal(0, sigma)
            central[f["name"]].append(f["lower"] + width * noisy_sum / max(noisy_count, 1.0) - truth)
            noisy_centred = float((2 * (x - f["lower"]) / width - 1).sum()) + data_rng.normal(0, sigma)
            mid = (f["lower"] + f["upper"]) / 2
            centred[f["name"]].append(mid + width / 2 * noisy_centred / max(noisy_count, 1.0) - truth)
            # the same job as feature_stats (count, centred sums and centred squares, for the variances too)
            sum_same_job = float((2 * (x - f["lower"]) / width - 1).sum()) + data_rng.normal(0, sigma_same_job)
            same_job[f["name"]].append(mid + width / 2 * sum_same_job / max(count_same_job, 1.0) - truth)
    out: dict[str, object] = {"devices": devices_n, "rows_per_device": [1, MAX_ROWS], "epsilon": epsilon,
                              "t_min": T_MIN, "repetitions": reps,
                              "means_share": means_share if means_share is not None else "default"}
    for f in FEATURES:
        p = float(np.sqrt(np.mean(np.square(product[f["name"]]))))
        c = float(np.sqrt(np.mean(np.square(central[f["name"]]))))
        cc = float(np.sqrt(np.mean(np.square(centred[f["name"]]))))
        sj = float(np.sqrt(np.mean(np.square(same_job[f["name"]]))))
        v = float(np.sqrt(np.mean(np.square(variance[f["name"]]))))
        out[f["name"]] = {"rmse_product": round(p, 5), "rmse_central": round(c, 5), "ratio": round(p / c, 4),
                          "rmse_central_centred": round(cc, 5), "ratio_to_centred": round(p / cc, 4),
                          "rmse_central_same_job": round(sj, 5), "ratio_to_same_job": round(p / sj, 4),
                          "variance_rmse_product": round(v, 5)}
    return out


def threshold_coverage(draws: int) -> dict[str, object]:
    from scipy.stats import skellam

    from queries.kind import AggregateNoise
    from queries.release import release_threshold
    from queries.selective import selective_interval
    from queries.uncertainty import Z95

    kind = get_kind("histogram")
    params = kind.parse_params({"buckets": [f"b{i}" for i in range(BUCKETS)], "max_contributions_per_device": 1})
    plan = kind.plan_round(params, kind.initial_state(params), 0)
    assert plan is not None
    cal = dp.calibrate_query("skellam", 1.0, DELTA, 1, T_MIN)
    t_c = dp.cohort_threshold(T_MIN, 400, DEFAULT_DROPOUT_ALLOWANCE)
    own = dp.cohort_noise(cal, plan, dp.plan_noise(cal, plan, t_c), t_c)
    noise = own.aggregate_noise(400)
    tau = release_threshold(noise, 400, plan.dim, params.false_release_rate, params.min_release_count)
    sigma = noise.std
    s = own.scale
    half = own.noise.per_device_scale * 400 / 2  # the summed shares: Skellam(μ/2, μ/2) in the scaled encoding
    law = skellam(half, half)
    rng = np.random.default_rng(31)
    rows = []
    for c in sorted({0, int(tau // 2), int(tau - sigma), int(tau), int(tau + sigma), int(tau + 3 * sigma)}):
        # released: unscale(s·c + N) = ⌊(s·c + N + s/2) / s⌋ ≥ τ, i.e. N ≥ s·τ − s/2 − s·c (integers)
        first = math.ceil(s * tau - s / 2 - s * c)
        ks = np.arange(first, first + int(60 * math.sqrt(2 * half)) + 10)  # the truncated law's support, ±60σ
        pmf = law.pmf(ks)
        ys = np.floor((s * c + rng.choice(ks, size=draws, p=pmf / pmf.sum()) + s // 2) / s)
        sel = sum(lo <= c <= hi for lo, hi in (selective_interval(float(y), sigma, tau, 0.0) for y in ys)) / draws
        plain = sum(y - Z95 * sigma <= c <= y + Z95 * sigma for y in ys) / draws
        rows.append({"true_count": c, "coverage_conditional": round(sel, 4), "coverage_plain": round(plain, 4)})
    return {"threshold": tau, "noise_std": round(sigma, 3), "draws_per_count": draws, "rows": rows,
            "min_coverage_conditional": min(r["coverage_conditional"] for r in rows)}


def triehh_recall(seeds: int) -> dict[str, object]:
    """Hardened TrieHH (heavy_hitters mode secagg, Skellam, max_length 10, 100,000 devices of one word each), run in
    process by `fleet_sim.evaluate_heavy_hitters` exactly as the server plans, noises and thresholds its rounds:
    recall@50 and precision@50 for ε ∈ {0.25, 0.5, 1, 2} at δ = 1e-6 (the production cap), and at ε = 0.25 also
    δ = 1e-10 (the evaluator's default 1/n²), on two held-out populations: English words drawn by their frequency
    in Python's bundled documentation (`fleet_sim.populations.english_population`; the 50th word has ≈ 330
    holders) and Zipf(1.1) pseudo-words over 10,000 (the 50th has ≈ 205)."""
    from fleet_sim import evaluate_heavy_hitters as evaluate
    from fleet_sim import populations as pop

    n, k = 100_000, 50
    cases = [(e, 1e-6) for e in (0.25, 0.5, 1.0, 2.0)] + [(0.25, 1e-10)]
    out: dict[str, object] = {"devices": n, "k": k, "seeds": seeds, "mechanism": "skellam", "max_length": 10}
    for name in ("english", "zipf"):
        rows = []
        for epsilon, delta in cases:
            recalls, precisions = [], []
            for seed in range(1, seeds + 1):
                rng = np.random.default_rng([seed, 1])
                strings = pop.english_population(n, rng) if name == "english" else pop.zipf_population(n, rng)
                run = evaluate.run("secagg", strings, epsilon, delta, k, seed)
                recalls.append(run["recall"])
                precisions.append(run["precision"])
            rows.append({"epsilon": epsilon, "delta": delta, "recall_min": min(recalls), "recall_mean": round(float(np.mean(recalls)), 3),
                         "recall_max": max(recalls), "precision_mean": round(float(np.mean(precisions)), 3)})
            print(f"[dp_central] triehh {name} ε={epsilon} δ={delta}: recall {recalls}", file=sys.stderr, flush=True)
        out[name] = rows
    return out


def _preview(spec: dict[str, object]) -> dict[str, dict[str, object]]:
    from analytics_server import preview, privacy
    from queries.spec import QuerySpec

    qspec = QuerySpec.model_validate(spec)
    kind = get_kind(qspec.kind)
    params = kind.parse_params(qspec.params)
    cal = privacy.check_and_calibrate(qspec, kind, params, "demo")
    return {v["path"]: v for v in preview.build(qspec, kind, params, cal).values}


def preview_vs_realized(counts: list[dict[str, object]], means: dict[str, object]) -> dict[str, object]:
    rows = []
    for case in counts:
        n = int(case["cohort"])  # type: ignore[call-overload]
        spec = {"kind": "histogram", "source": "s", "params": {"buckets": [f"b{i}" for i in range(BUCKETS)],
                                                               "max_contributions_per_device": 1},
                "privacy": {"mechanism": "skellam", "epsilon": 1.0, "delta": DELTA, "validation": "none"},
                "cohort": {"min_clients": T_MIN, "max_clients": max(n, T_MIN)}}
        v = _preview(spec)["/counts/b0"]
        rows.append({"cohort": n, "preview_std": round(v["std"], 4), "realized_rmse": case["rmse_cohort_sized"],
                     "realized_over_preview": round(float(case["rmse_cohort_sized"]) / v["std"], 4)})  # type: ignore[arg-type]
    spec = {"kind": "feature_stats", "source": "s", "params": {"features": FEATURES, "max_examples_per_device": MAX_ROWS},
            "privacy": {"mechanism": "skellam", "epsilon": means["epsilon"], "delta": DELTA, "validation": "none"},
            "cohort": {"min_clients": T_MIN, "max_clients": means["devices"]}}
    seen = _preview(spec)
    mean_rows = []
    for f in FEATURES:
        v = seen[f"/features/{f['name']}/mean"]
        got = means[f["name"]]["rmse_product"]  # type: ignore[index]
        lo, hi = v.get("std_range", [v["std"], v["std"]])
        mean_rows.append({"feature": f["name"], "preview_std_at_min_clients": round(v["std"], 4),
                          "preview_std_range": [round(lo, 4), round(hi, 4)], "realized_rmse": got,
                          "in_range": bool(lo <= got <= hi), "realized_over_preview": round(got / v["std"], 4)})
    return {"histogram_counts": rows, "feature_means": mean_rows}


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else REPS
    started = time.perf_counter()
    counts = [histogram_counts(n, reps) for n in (T_MIN, 2 * T_MIN, 4 * T_MIN)]
    means = feature_means(400, 2.0, 3 * reps)
    out = {
        "histogram_counts": counts,
        "feature_means": means,
        "feature_means_means_share_0.85": feature_means(400, 2.0, 3 * reps, means_share=0.85),
        "threshold_coverage": threshold_coverage(20 * reps),
        "triehh_recall": triehh_recall(3),
        "preview_vs_realized": preview_vs_realized(counts, means),
        "dropout_allowance": DEFAULT_DROPOUT_ALLOWANCE,
        "seconds": 0.0,
    }
    out["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
