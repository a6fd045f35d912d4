"""Evaluation tool: runs heavy-hitter discovery in process against the ground truth and prints JSON.

    python -m fleet_sim.evaluate_heavy_hitters --mode triehh|secagg --n N --population zipf \
        --epsilon E --k K --seed S [--delta D] [--population-file PATH] [--mechanism skellam]

It drives the same code the service runs: `plan_round` → every (sampled) device's `contribute` → the
sum → (secagg mode) plus every contributor's noise share → `decode_round` … → `finalize`. Secure
aggregation returns the exact sum of the contributors' vectors, so adding the integer vectors in the
clear here is equivalent. For speed, devices holding the same string are grouped: `contribute` is
deterministic, so one call per distinct string, weighted by the number of that string's devices that
take part, gives the same sum. Sampling stays per device and per round: a string held by c devices
contributes Binomial(c, q) voters, which is the distribution of c independent Bernoulli(q) draws.

Noise (secagg mode): each of the t_min = n devices adds its share (calibrated so that the sum over
t_min devices carries the target noise for ε over `rounds_upper_bound` rounds). Skellam shares sum
exactly to one Skellam with the summed parameter (Poisson additivity), so one draw is exact. Discrete
Gaussian shares are drawn per device when contributors × dim is small; above that, their sum is drawn as
one discrete Gaussian with the summed variance (a close approximation, flagged in the output).

Metrics at K: T = the K most frequent strings of the population (after the device's normalisation;
strings tied with the K-th count also count as correct), F = the K highest-count discovered strings;
recall = |F ∩ T| / K, precision = |F ∩ T| / |F| (0 when nothing is found), f1 their harmonic mean.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from typing import Any

import numpy as np

from queries import dp
from fleet_sim import populations as pop
from queries.heavy_hitters.encoding import normalize
from queries.heavy_hitters.kind import HeavyHittersKind
from secagg.randomness import SeededRandom

KIND = HeavyHittersKind()
PER_DEVICE_NOISE_LIMIT = 4_000_000
"""Above this many (contributors × dim) noise draws per round, discrete-Gaussian shares are summed in law."""


# --- the run --------------------------------------------------------------------------------------


def run(
    mode: str,
    strings: list[str],
    epsilon: float,
    delta: float,
    k: int,
    seed: int,
    max_length: int = 10,
    mechanism: str = "skellam",
    max_frontier: int = 256,
) -> dict[str, Any]:
    """Runs one query over devices holding `strings` (one each) and scores it against the truth."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    noise_rng = SeededRandom(b"heavy_hitters.evaluate/%d" % seed)  # noise bits never come from numpy
    n = len(strings)
    groups = pop.group(strings)
    distinct = list(groups)
    holders = np.array([groups[s] for s in distinct], dtype=np.int64)

    raw: dict[str, Any] = {"mode": mode, "max_length": max_length, "max_frontier": max_frontier}
    if mode == "triehh":
        raw |= {"epsilon": epsilon, "delta": delta, "population_size": n}
    params = KIND.parse_params(raw)

    cal = dp.calibrate_query(mechanism, epsilon, delta, KIND.rounds_upper_bound(params), n) if mode == "secagg" else None
    approx_noise = False
    scales: list[int] = []

    state = KIND.initial_state(params)
    r = 0
    while (plan := KIND.plan_round(params, state, r)) is not None:
        if plan.sample_rate < 1.0:
            voters = rng.binomial(holders, plan.sample_rate)
        else:
            voters = holders
        total = np.zeros(plan.dim, dtype=np.int64)
        for s, c in zip(distinct, voters):
            if c:
                vec = KIND.contribute(plan.typed_task(KIND), [s], rng)
                total[np.flatnonzero(vec)] += int(c) * vec[np.flatnonzero(vec)]
        contributors = int(voters.sum())
        aggregate_noise = None
        if cal is not None:  # as the server plans the round (its weight, the encoding scale), shares for t_min = n
            planned = dp.plan_noise(cal, plan)
            noise, scale = planned.noise, planned.scale
            scales.append(scale)
            total *= scale
            if mechanism == "skellam":
                total += dp.sample_noise("skellam", noise.per_device_scale * contributors, plan.dim, noise_rng)
            elif contributors * plan.dim <= PER_DEVICE_NOISE_LIMIT:
                for _ in range(contributors):
                    total += dp.sample_noise(mechanism, noise.per_device_scale, plan.dim, noise_rng)
            else:
                approx_noise = True
                total += dp.sample_noise(mechanism, noise.per_device_scale * math.sqrt(contributors), plan.dim, noise_rng)
            total = planned.unscale(total)  # as the server does: round half up
            aggregate_noise = planned.aggregate_noise(contributors)  # what the server passes
        state = KIND.decode_round(params, state, plan, total, contributors, aggregate_noise)
        r += 1
    result = KIND.finalize(params, state).result

    scores = score(strings, [h["value"] for h in result["heavy_hitters"]], k, params.casefold)
    out: dict[str, Any] = {
        "mode": mode,
        "n": n,
        "k": k,
        **scores,
        "rounds": result["rounds"],
        "epsilon": None,
        "delta": delta,
        "found": len(result["heavy_hitters"]),
        "distinct_strings": len(groups),
    }
    if mode == "triehh":
        block = KIND.privacy(params)
        assert block is not None
        out |= {"epsilon": block["epsilon"], "delta": block["delta"], "theta": block["theta"],
                "sample_rate": block["sample_rate"], "expected_sample": block["expected_sample"]}
    else:
        assert cal is not None
        out |= {"epsilon": dp.epsilon_spent(cal, KIND.rounds_upper_bound(params)), "mechanism": mechanism,
                "noise_std_per_round": [round(x, 3) for x in state.noise_std],
                "encoding_scales": scales, "release_thresholds": result["thresholds"],
                "frontier_truncated": result["frontier_truncated"], "noise_sum_approximated": approx_noise}
    out["top"] = result["heavy_hitters"][:10]
    out["seconds"] = round(time.perf_counter() - started, 2)
    return out


def score(strings: list[str], found_ranked: list[str], k: int, casefold: bool = True) -> dict[str, float]:
    """recall@K, precision@K and F1 of the ranked discoveries against the population's top K."""
    truth = Counter(normalize(s, casefold) for s in strings)
    truth.pop("", None)
    ranked = sorted(truth.items(), key=lambda kv: (-kv[1], kv[0]))
    k_eff = min(k, len(ranked))
    if k_eff == 0:
        return {"recall": 0.0, "precision": 0.0, "f1": 0.0}
    kth = ranked[k_eff - 1][1]
    relevant = {s for s, c in ranked if c >= kth}
    top_found = found_ranked[:k]
    hits = sum(1 for s in top_found if s in relevant)
    recall = min(hits, k_eff) / k_eff
    precision = hits / len(top_found) if top_found else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    return {"recall": recall, "precision": precision, "f1": f1}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fleet_sim.evaluate_heavy_hitters", description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["triehh", "secagg"], required=True)
    ap.add_argument("--n", type=int, default=100_000, help="devices (synthetic population)")
    ap.add_argument("--population", choices=["zipf", "english"], default="zipf",
                    help="zipf: pseudo-words with Zipf ranks; english: words drawn by their frequency in Python's docs")
    ap.add_argument("--population-file", help="one device's string per line; replaces the synthetic population")
    ap.add_argument("--epsilon", type=float, required=True)
    ap.add_argument("--delta", type=float, help="default 1/n²")
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--seed", type=int, default=None, help="default: from os.urandom")
    ap.add_argument("--max-length", type=int, default=10)
    ap.add_argument("--max-frontier", type=int, default=256)
    ap.add_argument("--mechanism", choices=["skellam", "discrete_gaussian"], default="skellam")
    ap.add_argument("--vocab", type=int, default=10_000, help="zipf: vocabulary size")
    ap.add_argument("--zipf-exponent", type=float, default=1.1)
    args = ap.parse_args(argv)

    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(8), "big")
    if args.population_file:
        strings = pop.file_population(args.population_file)
        population = f"file:{args.population_file}"
    elif args.population == "english":
        if args.n < 1:
            ap.error("--n: must be at least 1")
        strings = pop.english_population(args.n, np.random.default_rng([seed, 1]))
        population = "english(pydoc_data.topics)"
    else:
        if args.n < 1:
            ap.error("--n: must be at least 1")
        strings = pop.zipf_population(args.n, np.random.default_rng([seed, 1]), args.vocab, args.zipf_exponent,
                                      args.max_length)
        population = f"zipf(s={args.zipf_exponent}, vocab={args.vocab})"
    if not strings:
        ap.error("population: no devices")
    delta = args.delta if args.delta is not None else 1.0 / len(strings) ** 2
    try:
        out = run(args.mode, strings, args.epsilon, delta, args.k, seed, args.max_length, args.mechanism,
                  args.max_frontier)
    except ValueError as exc:  # pydantic ValidationError and calibration errors name the field
        print(json.dumps({"error": str(exc)}), file=sys.stderr)
        return 2
    out = {"population": population, "seed": seed, **out}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
