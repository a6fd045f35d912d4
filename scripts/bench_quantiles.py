"""`make bench` section "quantiles": the rank error of the `quantiles` kind's released p50/p90/p99, its intervals'
coverage, two central DP baselines at equal (ε, δ) and per-device bound, and the tree's branching.

Workload: ε = 1, δ = 1e-6, mechanism skellam, one feature `startup_ms` in [0, 10000], max_examples_per_device 3,
quantiles 0.5/0.9/0.99, t_min = every device. Each device holds 1–3 values (uniform), drawn independently from a
skewed, heavy-tailed mixture rounded to 10 ms (ties): 90 % lognormal(6.5, 0.8) and 10 % lognormal(8.0, 0.8); about
0.7 % of the values lie above 10,000 and are clipped (kept below 1 % so that p99 is a value inside the range, not the
clipping bound). A seed draws a new population (numpy, data only) and new noise.

The product, as the server runs it, fast: `queries.local_run.run_query` would draw each device's noise share
(~5,500 entries per device), far too slow for 100,000 devices. As `fleet_sim.evaluate_heavy_hitters` does, the exact
sum of the devices' vectors (what secure aggregation returns) is built from the kind's own `contribute`, called once
per distinct value and weighted by how many values equal it: no device holds more than max_examples_per_device
values, so `contribute` keeps all of them and a device's vector is the sum of its values' vectors (checked below
against one `contribute` per device on a 10,000-device population, and against `run_query` without noise). The noise
of all t_min = n devices' Skellam shares is ONE Skellam draw with the summed parameter (exact: Poisson additivity),
from `secagg.randomness.SeededRandom`, added to the aggregate in the plan's encoding scale; `planned.unscale`, then
`decode_round` with `planned.aggregate_noise(n)` and `finalize` — calibrated and planned as `run_query` does
(`dp.calibrate_query` over the kind's rounds, `dp.plan_noise`/`dp.cohort_noise` for a cohort of n with t_min = n).

Rank error of a released value v for quantile q, as a fraction of the number of values n: the distance from q to
[F(v−), F(v)], F the empirical CDF of the true clipped values (= |fraction of values below v − q| unless v is one of
the values, where ties make the fraction below a range). With values in 10 ms steps an atom near the median holds
about 0.6 % of the values, so a released value a few ms off it (the kind interpolates inside a 2.4 ms leaf) is
charged the whole atom: `rank_error_rmse_10ms` reads v at the data's precision (rounded to 10 ms) first, for every
mechanism alike; `rank_error_rmse` takes v as released. RMSE over seeds. Coverage: the share of (seed, quantile)
whose 95 % interval (`release.intervals`) contains the true quantile (the ⌈q·n⌉-th smallest clipped value).

Central baselines at the same (ε, δ) and bound (3 values per device):
(a) the same b-ary tree with central Gaussian noise, σ = dp_accounting's tight analytic Gaussian
    `get_sigma_gaussian(ε, δ)` × the tree vector's L2 sensitivity 3·√(D + 2) (noise from SeededRandom, Box–Muller),
    post-processed by the kind's own `release_feature`;
(b) Smith's exponential-mechanism quantile (STOC 2011) over the sorted clipped values, ε/3 per quantile (pure DP),
    utility −|rank − q·n| with sensitivity 3: interval i between consecutive values is chosen with probability
    ∝ width·exp(−(ε/3)·|i − q·n| / (2·3)) (Gumbel-max in log space, numpy Generator), the value uniform inside it.

Branching: at 10,000 devices, the product's rank-error RMSE for branching 2, 4, 8, 16 at 4,096 leaves (levels 12,
6, 4, 3) on the same populations, with the central tree (a) beside it.

Prints one JSON object (last line); progress on stderr. Argument: seeds per population size (default 1,000; about 80 s
on two cores).
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import numpy as np
from dp_accounting.gaussian_mechanism import get_sigma_gaussian

from queries import dp
from queries.kind import value_path
from queries.local_run import run_query
from queries.quantiles import QuantileFeature, QuantilesKind, release_feature
from queries.registry import get_kind
from queries.spec import DEFAULT_DROPOUT_ALLOWANCE, PrivacySpec
from secagg.randomness import SeededRandom, uniforms

EPSILON = 1.0
DELTA = 1e-6
MECHANISM = "skellam"
NAME, LOWER, UPPER = "startup_ms", 0.0, 10000.0
FEATURE: dict[str, Any] = {"name": NAME, "lower": LOWER, "upper": UPPER}
QUANTILES = [0.5, 0.9, 0.99]
MAX_EXAMPLES = 3
SIZES = (10_000, 100_000)
TARGETS = {10_000: 0.01, 100_000: 0.003}
BRANCHINGS = (2, 4, 8, 16)
RESOLUTION = 4096
SEEDS = 1000
GRID = 10.0
"""The data's precision (values are recorded in 10 ms steps)."""
TAIL_WEIGHT, BODY, TAIL = 0.10, (6.5, 0.8), (8.0, 0.8)


def log(msg: str) -> None:
    print(f"[quantiles] {msg}", file=sys.stderr, flush=True)


# --- data ------------------------------------------------------------------------------------------


def population(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(values per device, all values in device order): 1–3 values per device from the rounded mixture."""
    rng = np.random.default_rng([seed, n])
    counts = rng.integers(1, MAX_EXAMPLES + 1, size=n)
    total = int(counts.sum())
    tail = rng.random(total) < TAIL_WEIGHT
    logs = np.where(tail, rng.normal(TAIL[0], TAIL[1], total), rng.normal(BODY[0], BODY[1], total))
    return counts, np.round(np.exp(logs) / 10.0) * 10.0


def device_rows(counts: np.ndarray, values: np.ndarray) -> list[list[dict[str, float]]]:
    out, start = [], 0
    for c in counts:
        out.append([{NAME: float(v)} for v in values[start:start + int(c)]])
        start += int(c)
    return out


def rank_error(sorted_x: np.ndarray, v: float, q: float, grid: float = 0.0) -> float:
    """Distance from q to [F(v−), F(v)] (fractions of n); with `grid`, v rounded to it first (the data's precision)."""
    n = len(sorted_x)
    if grid:
        v = math.floor(v / grid + 0.5) * grid
    lo = np.searchsorted(sorted_x, v, side="left") / n
    hi = np.searchsorted(sorted_x, v, side="right") / n
    return 0.0 if lo <= q <= hi else float(min(abs(lo - q), abs(hi - q)))


def rank_width(sorted_x: np.ndarray, lo: float, hi: float) -> float:
    """The share of the values an interval [lo, hi] spans."""
    n = len(sorted_x)
    return float((np.searchsorted(sorted_x, hi, side="right") - np.searchsorted(sorted_x, lo, side="left")) / n)


def true_quantile(sorted_x: np.ndarray, q: float) -> float:
    return float(sorted_x[max(math.ceil(q * len(sorted_x)) - 1, 0)])


# --- the product (fast path) -----------------------------------------------------------------------


class Setup:
    """One tree configuration at one population size: params, plan, planned noise, cached per-value vectors."""

    def __init__(self, kind: QuantilesKind, n: int, branching: int | None) -> None:
        raw: dict[str, Any] = {"features": [FEATURE], "quantiles": QUANTILES, "max_examples_per_device": MAX_EXAMPLES,
                               "resolution": RESOLUTION}
        if branching is not None:
            raw["branching"] = branching
        privacy = PrivacySpec.model_validate({"mechanism": MECHANISM, "epsilon": EPSILON, "delta": DELTA})
        self.kind = kind
        self.params = kind.parse_params(kind.bind_privacy(raw, privacy))
        plan = kind.plan_round(self.params, kind.initial_state(self.params), 0)
        assert plan is not None
        self.plan = plan
        self.task = kind.parse_task(plan.task)
        self.b, self.d = self.params.tree
        # as run_query: calibrated over the kind's rounds with t_min = n, one cohort of n devices
        cal = dp.calibrate_query(MECHANISM, EPSILON, DELTA, rounds=kind.rounds_upper_bound(self.params), t_min=n)
        t_c = dp.cohort_threshold(cal.t_min, n, DEFAULT_DROPOUT_ALLOWANCE)
        self.planned = dp.cohort_noise(cal, plan, dp.plan_noise(cal, plan, t_c), t_c)
        self.n = n
        self.vectors: dict[float, np.ndarray] = {}
        self.rng = np.random.default_rng(0)  # contribute's sampling: never used (no device holds more than the cap)
        self.central_sigma = get_sigma_gaussian(EPSILON, DELTA) * MAX_EXAMPLES * math.sqrt(self.d + 2)

    def exact_sum(self, values: np.ndarray) -> np.ndarray:
        """Σ over devices of `contribute`: each distinct value's vector times how many values equal it."""
        total = np.zeros(self.plan.dim, dtype=np.int64)
        uniq, cnt = np.unique(values, return_counts=True)
        for v, c in zip(uniq.tolist(), cnt.tolist()):
            vec = self.vectors.get(v)
            if vec is None:
                vec = self.vectors[v] = self.kind.contribute(self.task, [{NAME: v}], self.rng)
            total += c * vec
        return total

    def product(self, exact: np.ndarray, contributors: int, noise_rng: SeededRandom) -> Any:
        """The release, as the server makes it, from the exact sum plus the summed Skellam shares."""
        planned = self.planned
        noisy = exact * planned.scale + np.asarray(
            dp.sample_noise(MECHANISM, planned.noise.per_device_scale * contributors, self.plan.dim, noise_rng),
            dtype=np.int64)
        state = self.kind.decode_round(self.params, self.kind.initial_state(self.params), self.plan,
                                       planned.unscale(noisy), contributors, planned.aggregate_noise(contributors))
        return self.kind.finalize(self.params, state)

    def central_tree(self, exact: np.ndarray, noise_rng: SeededRandom) -> dict[float, tuple[float, float, float]]:
        """Baseline (a): the same tree, central Gaussian noise, the kind's post-processing."""
        noisy = exact.astype(np.float64) + self.central_sigma * gaussians(self.plan.dim, noise_rng)
        spec = QuantileFeature.model_validate(FEATURE)
        return release_feature(spec, noisy, self.b, self.d, self.central_sigma, QUANTILES).quantiles


def gaussians(size: int, source: SeededRandom) -> np.ndarray:
    """Standard normals from the byte source (Box–Muller)."""
    u = uniforms(source, 2 * size)
    out: np.ndarray = np.sqrt(-2.0 * np.log1p(-u[:size])) * np.cos(2.0 * np.pi * u[size:])
    return out


def exponential_quantile(sorted_x: np.ndarray, q: float, epsilon: float, sensitivity: float, lower: float,
                         upper: float, gen: np.random.Generator) -> float:
    """Baseline (b): Smith's exponential mechanism over the intervals between consecutive sorted values."""
    n = len(sorted_x)
    edges = np.concatenate([[lower], sorted_x, [upper]])
    widths = np.diff(edges)  # interval i (0 … n) has i values at or below its left end
    with np.errstate(divide="ignore"):
        score = np.log(widths) - epsilon * np.abs(np.arange(n + 1) - q * n) / (2.0 * sensitivity)
    i = int(np.argmax(score + gen.gumbel(size=n + 1)))
    return float(edges[i] + gen.random() * widths[i])


# --- checks ----------------------------------------------------------------------------------------


def check_fast_path(kind: QuantilesKind) -> dict[str, Any]:
    """The grouped sum equals one `contribute` per device; without noise the fast path releases what run_query does."""
    setup = Setup(kind, 10_000, None)
    counts, values = population(10_000, 999)
    rows = device_rows(counts, values)
    per_device = np.zeros(setup.plan.dim, dtype=np.int64)
    for r in rows:
        per_device += kind.contribute(setup.task, r, setup.rng)
    grouped = setup.exact_sum(values)
    assert np.array_equal(per_device, grouped), "grouped contributions differ from per-device contributions"
    small = rows[:2000]
    ref = run_query(kind, {"features": [FEATURE], "quantiles": QUANTILES, "max_examples_per_device": MAX_EXAMPLES},
                    small, rng=np.random.default_rng(1)).result
    state = kind.decode_round(setup.params, kind.initial_state(setup.params), setup.plan,
                              setup.exact_sum(np.concatenate([[r[NAME] for r in d] for d in small])),
                              len(small))
    mine = kind.finalize(setup.params, state).result
    assert mine == ref, "the fast path's noiseless release differs from run_query's"
    return {"grouped_equals_per_device_10000": True, "noiseless_equals_run_query_2000": True}


# --- the measurement -------------------------------------------------------------------------------


def rmse(errors: list[float]) -> float:
    return float(np.sqrt(np.mean(np.square(errors))))


METRICS = {"rank_error_rmse": 0.0, "rank_error_rmse_10ms": GRID}
"""Rank error of the released value as it is, and read at the data's precision (rounded to 10 ms)."""


def measure(kind: QuantilesKind, n: int, seeds: int, branchings: tuple[int | None, ...]) -> dict[str, Any]:
    setups = {b: Setup(kind, n, b) for b in branchings}
    main = setups[branchings[0]]
    qkeys = [repr(q) for q in QUANTILES]

    def table() -> dict[str, dict[str, list[float]]]:
        return {m: {k: [] for k in qkeys} for m in METRICS}

    product = {b: table() for b in branchings}
    central_tree = {b: table() for b in branchings}
    central_em = table()
    covered: dict[Any, dict[str, list[bool]]] = {b: {k: [] for k in qkeys} for b in branchings}
    central_cov: dict[str, list[bool]] = {k: [] for k in qkeys}
    width: dict[str, list[float]] = {k: [] for k in qkeys}
    central_width: dict[str, list[float]] = {k: [] for k in qkeys}
    n_values, clipped = [], []
    started = time.perf_counter()

    def score(into: dict[str, dict[str, list[float]]], x: np.ndarray, v: float, q: float, k: str) -> None:
        for m, grid in METRICS.items():
            into[m][k].append(rank_error(x, v, q, grid))

    for seed in range(seeds):
        counts, values = population(n, seed)
        clipped_x = np.sort(np.clip(values, LOWER, UPPER))
        n_values.append(len(values))
        clipped.append(float(np.mean(values > UPPER)))
        truth = {q: true_quantile(clipped_x, q) for q in QUANTILES}
        for b, setup in setups.items():
            exact = setup.exact_sum(values)
            rel = setup.product(exact, n, SeededRandom(f"bench-quantiles/{n}/{b}/{seed}/product".encode()))
            got = rel.result["features"][NAME]["quantiles"]
            cen = setup.central_tree(exact, SeededRandom(f"bench-quantiles/{n}/{b}/{seed}/central".encode()))
            for q, k in zip(QUANTILES, qkeys):
                score(product[b], clipped_x, got[k], q, k)
                lo, hi = rel.intervals[value_path("features", NAME, "quantiles", k)]
                covered[b][k].append(bool(lo <= truth[q] <= hi))
                score(central_tree[b], clipped_x, cen[q][0], q, k)
                if setup is main:
                    width[k].append(rank_width(clipped_x, lo, hi))
                    central_cov[k].append(bool(cen[q][1] <= truth[q] <= cen[q][2]))
                    central_width[k].append(rank_width(clipped_x, cen[q][1], cen[q][2]))
        gen = np.random.default_rng([seed, n, 7])
        for q, k in zip(QUANTILES, qkeys):
            v = exponential_quantile(clipped_x, q, EPSILON / len(QUANTILES), MAX_EXAMPLES, LOWER,
                                     UPPER, gen)
            score(central_em, clipped_x, v, q, k)
        if (seed + 1) % max(1, seeds // 5) == 0:
            log(f"{n} devices: {seed + 1}/{seeds} seeds, {time.perf_counter() - started:.1f} s")

    def rmses(t: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
        return {m: {k: round(rmse(t[m][k]), 6) for k in qkeys} for m in METRICS}

    def share(c: dict[str, list[bool]] | dict[str, list[float]], digits: int = 4) -> dict[str, float]:
        return {k: round(float(np.mean(c[k])), digits) for k in qkeys}

    p, a, e = rmses(product[branchings[0]]), rmses(central_tree[branchings[0]]), rmses(central_em)
    target = TARGETS.get(n, math.inf)
    out: dict[str, Any] = {
        "devices": n,
        "seeds": seeds,
        "n_values_mean": round(float(np.mean(n_values)), 1),
        "clipped_above_fraction": round(float(np.mean(clipped)), 5),
        "tree": {"branching": main.b, "levels": main.d, "leaves": main.b ** main.d, "dim": main.plan.dim},
        "noise_std_per_entry": round(main.planned.std_released(n), 3),
        "encoding_scale": main.planned.scale,
        "product": {**p, "coverage_95": share(covered[branchings[0]]),
                    "coverage_95_all": round(float(np.mean([c for k in qkeys for c in covered[branchings[0]][k]])), 4),
                    "interval_rank_width_mean": share(width, 6)},
        "central_tree_gaussian": {"sigma": round(main.central_sigma, 3), **a, "coverage_95": share(central_cov),
                                  "interval_rank_width_mean": share(central_width, 6)},
        "central_exponential": {"epsilon_per_quantile": round(EPSILON / len(QUANTILES), 6), **e},
        "ratio_to_best_central": {m: {k: round(p[m][k] / min(a[m][k], e[m][k]), 3) if min(a[m][k], e[m][k]) > 0
                                      else None for k in qkeys} for m in METRICS},
        "best_central": {m: {k: "tree_gaussian" if a[m][k] <= e[m][k] else "exponential" for k in qkeys}
                         for m in METRICS},
        "target_rank_error": TARGETS.get(n),
        "meets_target": {m: all(v <= target for v in p[m].values()) for m in METRICS},
        "seconds": round(time.perf_counter() - started, 1),
    }
    if len(branchings) > 1:
        rows = []
        for b, setup in setups.items():
            pb = rmses(product[b])
            rows.append({"branching": setup.b, "levels": setup.d, "leaves": setup.b ** setup.d,
                         "noise_std_per_entry": round(setup.planned.std_released(n), 3), **pb,
                         "mean_over_quantiles": {m: round(float(np.mean(list(pb[m].values()))), 6) for m in METRICS},
                         "coverage_95_all": round(float(np.mean([c for k in qkeys for c in covered[b][k]])), 4),
                         "central_tree": rmses(central_tree[b])})
        rows.sort(key=lambda r: r["branching"])
        out["branching"] = rows
    return out


def main() -> None:
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else SEEDS
    seeds_large = seeds
    started = time.perf_counter()
    kind = get_kind("quantiles")
    assert isinstance(kind, QuantilesKind)
    checks = check_fast_path(kind)
    log(f"fast path checked ({time.perf_counter() - started:.1f} s)")
    planner = kind.parse_params({"features": [FEATURE], "quantiles": QUANTILES}).tree
    # the planner's tree first (the product's figures), then the other branchings on the same populations
    small = measure(kind, SIZES[0], seeds, (None, *(b for b in BRANCHINGS if b != planner[0])))
    large = measure(kind, SIZES[1], seeds_large, (None,))
    branching = small.pop("branching")
    best = {m: min(branching, key=lambda r: r["mean_over_quantiles"][m])["branching"] for m in METRICS}
    out = {
        "epsilon": EPSILON, "delta": DELTA, "mechanism": MECHANISM, "feature": FEATURE, "quantiles": QUANTILES,
        "max_examples_per_device": MAX_EXAMPLES, "values_per_device": [1, MAX_EXAMPLES],
        "population": (f"per value {1 - TAIL_WEIGHT:g} lognormal{BODY} + {TAIL_WEIGHT:g} lognormal{TAIL}, "
                       "rounded to 10 ms"),
        "rank_error": "distance from q to [F(v-), F(v)] over the true clipped values, fraction of n_values; "
                      "_10ms: v rounded to 10 ms (the data's precision) first",
        "checks": checks,
        "devices_10000": small,
        "devices_100000": large,
        "branching_10000": {"planner_choice": {"branching": planner[0], "levels": planner[1]},
                            "best_measured": best, "seeds": seeds,
                            "rmse_relative_se_approx": round(1 / math.sqrt(2 * seeds), 4), "rows": branching},
        "seconds": 0.0,
    }
    out["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
