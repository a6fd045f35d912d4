"""The safety floor (`secagg.floor`) against simulation: random ring graphs, random corrupt and dropped sets.

What the floor claims (its module docstring; Bell, Bonawitz, Gascón, Lepoint and Raykova, "Secure Single-Server
Aggregation with (Poly)Logarithmic Overhead", CCS 2020, §3–4, for the two conditions): in a cohort of n with ⌊γ·n⌋
corrupt parties and ⌈δ·n⌉ dropped ones, the ring graph of its degree k and its threshold t (closed neighbourhoods of
m = k + 1) fail

- *security* — some honest party has at least 2t − m corrupt neighbours (enough to sign two survivor sets) — and
- *connectivity* — some k/2 ring-consecutive parties are all corrupt or dropped (the honest survivors split) —

each with probability at most 2^−(σ+g), when the ring order is uniformly random (drawn from the members root). The
bounds behind it: a party's k neighbours are a uniform sample without replacement of the n − 1 others, so its corrupt
count is hypergeometric, and P[X ≥ a·k] ≤ exp(−k·D(a ‖ p)) — the Chernoff–Hoeffding bound (W. Hoeffding, "Probability
Inequalities for Sums of Bounded Random Variables", JASA 58, 1963: Theorem 1, and §6 for sampling without
replacement, whose tail is no heavier than with replacement); a given run of k/2 positions is all bad with
probability at most (γ + δ)^(k/2); both union-bounded over the n parties (positions). On the complete graph the
security condition holds for sure (at most ⌊γ·n⌋ corrupt anywhere) and there is no run to fear.

The server's `plan` adds *correctness*: with parties dropping independently at its dropout, every closed
neighbourhood keeps at least t live members with probability ≥ 1 − 2^−(correctness bits) (the same Chernoff bound on
Bin(k, dropout), union over n).

Each test states a small bound (σ + g between 3 and 8 bits, so that failures are frequent enough to count), simulates,
and checks the observed failure count against the bound with an exact one-sided binomial test at level 10^−9: if the
true rate is at most the bound the test fails with probability below 10^−9, so it cannot flake; it fails when the
floor is wrong by a margin the sample can see (`test_the_simulation_sees_a_floor_one_step_too_low` shows that margin
for a threshold one below the floor and a degree two below it).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from secagg import floor
from secagg.floor import Assumptions, UnsafeParametersError
from secagg.graph import NeighbourGraph

LEVEL = 1e-9
"""The one-sided binomial test's level: the chance that a correct floor fails a check."""
SIMULATION = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def within_bound(failures: int, trials: int, bound: float) -> bool:
    """Whether `failures` in `trials` is consistent with a failure rate of at most `bound`: P[Bin(trials, bound) ≥
    failures] ≥ LEVEL."""
    return failures == 0 or float(binom.sf(failures - 1, trials, bound)) >= LEVEL


def _windows(rows: np.ndarray, half: int) -> np.ndarray:
    """For each row (a 0/1 value per ring slot) and slot i, the sum over slots i − half .. i + half (wrapping)."""
    sets, n = rows.shape
    tripled = np.concatenate((rows, rows, rows), axis=1)
    prefix = np.concatenate((np.zeros((sets, 1), dtype=np.int64), np.cumsum(tripled, axis=1)), axis=1)
    centre = np.arange(n) + n
    return prefix[:, centre + half + 1] - prefix[:, centre - half]


def _runs(rows: np.ndarray, length: int) -> np.ndarray:
    """For each row and slot i, the sum over slots i .. i + length − 1 (wrapping)."""
    sets, n = rows.shape
    doubled = np.concatenate((rows, rows), axis=1)
    prefix = np.concatenate((np.zeros((sets, 1), dtype=np.int64), np.cumsum(doubled, axis=1)), axis=1)
    return prefix[:, np.arange(n) + length] - prefix[:, np.arange(n)]


def simulate_floor(n: int, degree: int, threshold: int, corrupt: int, dropped: int, graphs: int, sets: int,
                   rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(security failures, connectivity failures, either, trials) over `graphs` random ring graphs (NeighbourGraph from
    random seeds) × `sets` random disjoint corrupt and dropped sets of the given sizes each."""
    half, m = degree // 2, degree + 1
    need = 2 * threshold - m
    security = connectivity = either = 0
    for _ in range(graphs):
        graph = NeighbourGraph(n, degree, rng.bytes(32))
        order = graph._ring[0]  # order[slot] = the party at that ring slot
        # each set: a random permutation of the parties; its first `corrupt` are corrupt, the next `dropped` dropped
        labels = rng.permuted(np.tile(np.arange(1, n + 1), (sets, 1)), axis=1)
        status = np.zeros((sets, n + 1), dtype=np.int8)
        rows = np.arange(sets)[:, None]
        status[rows, labels[:, :corrupt]] = 2
        status[rows, labels[:, corrupt:corrupt + dropped]] = 1
        ring = status[:, order]  # per ring slot
        is_corrupt = (ring == 2).astype(np.int64)
        seen = _windows(is_corrupt, half) - is_corrupt  # corrupt neighbours of the party at each slot
        sec = np.any((seen >= need) & (ring != 2), axis=1)
        conn = np.any(_runs((ring > 0).astype(np.int64), half) >= half, axis=1)
        security += int(sec.sum())
        connectivity += int(conn.sum())
        either += int((sec | conn).sum())
    return security, connectivity, either, graphs * sets


def simulate_dropout(n: int, degree: int, threshold: int, dropout: float, graphs: int, sets: int,
                     rng: np.random.Generator) -> tuple[int, int]:
    """(failures, trials): parties drop independently with probability `dropout`; a trial fails when some party's
    closed neighbourhood keeps fewer than `threshold` live members (its secrets — self-mask seed if it is live, mask
    key if it dropped — could not be reconstructed)."""
    failures = 0
    for _ in range(graphs):
        graph = NeighbourGraph(n, degree, rng.bytes(32))
        live = np.zeros((sets, n + 1), dtype=np.int64)
        live[:, 1:] = rng.random((sets, n)) >= dropout  # per party
        ring = live[:, graph._ring[0]]  # per ring slot
        failures += int(np.any(_windows(ring, degree // 2) < threshold, axis=1).sum())
    return failures, graphs * sets


@st.composite
def assumptions(draw: st.DrawFn) -> tuple[int, Assumptions]:
    n = draw(st.integers(150, 3000), label="n")
    gamma = draw(st.floats(0.05, 0.4), label="corrupt_fraction")
    delta = draw(st.floats(0.0, 0.2), label="dropout_fraction")
    bits = draw(st.integers(3, 8), label="security_bits + grinding_bits")
    security = draw(st.integers(1, bits), label="security_bits")
    return n, Assumptions(gamma, delta, security, bits - security)


def _sizes(n: int, a: Assumptions) -> tuple[int, int]:
    return floor.corrupt_count(n, a), math.ceil(a.dropout_fraction * n - 1e-9)


@SIMULATION
@given(assumptions(), st.integers(0, 2**32 - 1))
def test_the_floor_keeps_security_and_connectivity_failures_under_its_bound(case, seed):
    """At `safety_floor(n, a)`: the simulated rate of some honest party having ≥ 2t − m corrupt neighbours, and of a
    run of k/2 ring-consecutive corrupt-or-dropped parties, each stays under 2^−(σ+g) (and the rate of either, under
    the union of the two bounds); the complete graph is checked exactly (⌊γ·n⌋ < 2t − m)."""
    n, a = case
    bound = 2.0 ** -a.bits
    f = floor.safety_floor(n, a)
    corrupt, dropped = _sizes(n, a)
    if f.complete:
        assert corrupt < 2 * f.threshold - n and f.threshold <= n
        return
    assert f.degree % 2 == 0 and floor.connected(n, f.degree, a)
    sec, conn, either, trials = simulate_floor(n, f.degree, f.threshold, corrupt, dropped, 16, 250,
                                               np.random.default_rng(seed))
    assert within_bound(sec, trials, bound), (f, sec, trials, bound)
    assert within_bound(conn, trials, bound), (f, conn, trials, bound)
    assert within_bound(either, trials, 2 * bound), (f, either, trials, bound)


@SIMULATION
@given(assumptions(), st.integers(3, 8), st.integers(0, 2**32 - 1))
def test_the_plan_s_threshold_survives_its_dropout(case, correctness_bits, seed):
    """`plan(n, δ, a, c)`: on a sparse graph, with parties dropping independently at δ, every closed neighbourhood
    keeps t live members except with probability ≤ 2^−c (simulated); on the complete graph, t ≤ n − ⌈δ·n⌉ survivors.
    Its degree and threshold are never below the device's floor."""
    n, a = case
    plan = floor.plan(n, a.dropout_fraction, a, correctness_bits)
    floor.check(n, plan.degree, plan.threshold, a)  # a device with the same assumptions accepts the plan
    if plan.complete:
        assert plan.threshold <= n - math.ceil(a.dropout_fraction * n - 1e-9)
        return
    failures, trials = simulate_dropout(n, plan.degree, plan.threshold, a.dropout_fraction, 8, 250,
                                        np.random.default_rng(seed))
    assert within_bound(failures, trials, 2.0 ** -correctness_bits), (plan, failures, trials)


def test_the_simulation_sees_a_floor_one_step_too_low():
    """The checks above have teeth: a threshold one below the floor's (n = 2,000, γ = 0.05, δ = 0.2, 8 bits) gives a
    security failure rate the sample shows to be above 2^−8 (about 90 failures in 4,000 trials, where the bound allows
    15.6 and the test 43), and a degree two below the floor's (n = 500, γ = 0.05, δ = 0, 8 bits: degree 6 instead of 8,
    with its own least threshold) a connectivity failure rate far above it — while the floor itself passes on the same
    sample sizes. (Seeded: the outcome is fixed.)"""
    rng = np.random.default_rng(46)
    n, a = 2000, Assumptions(0.05, 0.2, 4, 4)
    bound = 2.0 ** -a.bits
    f = floor.safety_floor(n, a)
    corrupt, dropped = _sizes(n, a)
    sec, conn, _, trials = simulate_floor(n, f.degree, f.threshold, corrupt, dropped, 16, 250, rng)
    assert within_bound(sec, trials, bound) and within_bound(conn, trials, bound)
    low_sec, _, _, trials = simulate_floor(n, f.degree, f.threshold - 1, corrupt, dropped, 16, 250, rng)
    assert not within_bound(low_sec, trials, bound), (f, low_sec, trials)

    n, a = 500, Assumptions(0.05, 0.0, 4, 4)
    f = floor.safety_floor(n, a)
    corrupt, dropped = _sizes(n, a)
    assert f.degree == 8
    sec, conn, _, trials = simulate_floor(n, f.degree, f.threshold, corrupt, dropped, 16, 250, rng)
    assert within_bound(sec, trials, bound) and within_bound(conn, trials, bound)
    lower = f.degree - 2
    t_lower = floor.threshold_floor(n, lower, a)
    assert t_lower is not None and not floor.connected(n, lower, a)
    _, low_conn, _, trials = simulate_floor(n, lower, t_lower, corrupt, dropped, 16, 250, rng)
    assert not within_bound(low_conn, trials, bound), (lower, low_conn, trials)


# -- the floor's arithmetic at its boundaries ----------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [0.05, 0.2, 1 / 3, 0.45])
def test_complete_graphs_take_the_exact_threshold(gamma):
    """n = 2..100 on the complete graph: t = ⌊(n + ⌊γ·n⌋)/2⌋ + 1 (or none when that exceeds n); `check` accepts it and
    refuses t − 1 naming the threshold."""
    a = Assumptions(gamma, 0.0, 40, 40)
    for n in range(2, 101):
        t = floor.threshold_floor(n, n - 1, a)
        exact = (n + math.floor(gamma * n + 1e-9)) // 2 + 1
        assert t == (exact if exact <= n else None), n
        if t is None:
            with pytest.raises(UnsafeParametersError, match="^threshold"):
                floor.check(n, n - 1, n, a)
            continue
        assert 2 * t - n > math.floor(gamma * n + 1e-9)  # more than every corrupt party signs a second set
        floor.check(n, n - 1, t, a)
        with pytest.raises(UnsafeParametersError, match="^threshold"):
            floor.check(n, n - 1, t - 1, a)


@pytest.mark.parametrize("n", [200, 1000, 10_000])
def test_sparse_floors_are_the_least_connected_even_degree_and_the_least_safe_threshold(n):
    a = Assumptions()
    f = floor.safety_floor(n, a)
    assert not f.complete and f.degree % 2 == 0
    assert floor.connected(n, f.degree, a) and not floor.connected(n, f.degree - 2, a)
    assert f.threshold == floor.threshold_floor(n, f.degree, a)
    floor.check(n, f.degree, f.threshold, a)
    with pytest.raises(UnsafeParametersError, match="^threshold"):
        floor.check(n, f.degree, f.threshold - 1, a)
    with pytest.raises(UnsafeParametersError, match="^degree"):
        floor.check(n, f.degree - 2, f.degree - 1, a)
    with pytest.raises(UnsafeParametersError, match="^degree"):
        floor.check(n, 2, 3, a)
    floor.check(n, n - 1, floor.threshold_floor(n, n - 1, a) or n, a)  # the complete graph is always an option
    # the bound behind the threshold: one below it, the union over n of the Chernoff–Hoeffding tail exceeds 2^-80
    p = floor.corrupt_count(n, a) / (n - 1)
    m = f.degree + 1
    assert floor.log2_tail(f.degree, 2 * f.threshold - m, p) <= -a.bits - math.log2(n)
    assert floor.log2_tail(f.degree, 2 * (f.threshold - 1) - m, p) > -a.bits - math.log2(n)


def test_untrusted_neighbours_raise_the_floor():
    """`untrusted` (neighbours without a valid issuer token) are certainly corrupt: on the complete graph more of them
    than ⌊γ·n⌋ raise the threshold the floor needs; on a sparse graph 2t − m of them are refused outright."""
    n = 21
    t = floor.threshold_floor(n, n - 1)
    assert t == 15  # ⌊(21 + 7)/2⌋ + 1
    for untrusted in range(0, 9):  # up to ⌊(21 + 8)/2⌋ + 1 = 15
        floor.check(n, n - 1, t, untrusted=untrusted)
    with pytest.raises(UnsafeParametersError, match="^threshold"):
        floor.check(n, n - 1, t, untrusted=9)  # ⌊(21 + 9)/2⌋ + 1 = 16 > 15: nine could sign a second set
    floor.check(n, n - 1, 16, untrusted=9)
    n = 1000
    f = floor.safety_floor(n)
    need = 2 * f.threshold - (f.degree + 1)
    floor.check(n, f.degree, f.threshold, untrusted=need - 1)
    with pytest.raises(UnsafeParametersError, match="^threshold: .* no valid issuer token"):
        floor.check(n, f.degree, f.threshold, untrusted=need)
