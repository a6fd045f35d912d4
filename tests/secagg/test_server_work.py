"""The server's per-session work stays near linear in n·degree: survivor pruning is a worklist fixpoint equal to
the repeated-pass definition, and unmasking reuses Lagrange coefficient sets along the ring instead of computing
one set (O(t²)) per reconstructed secret — with the sum still exact."""

from __future__ import annotations

import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from secagg import SecAggConfig, ServerSession, shamir
from secagg.phases import Phase
from secagg.simulate import expected_sum, run_session


def _prune_by_passes(server: ServerSession, members: frozenset[int]) -> frozenset[int]:
    """The definition: drop every party with fewer than t closed neighbours among the rest, until none."""
    current = set(members)
    changed = True
    while changed:
        changed = False
        for u in sorted(current):
            if len(server._graph.closed_set(u) & current) < server._t:
                current.discard(u)
                changed = True
    return frozenset(current)


@settings(max_examples=60, deadline=None)
@given(st.integers(20, 400), st.sampled_from(["sparse", "complete"]), st.integers(1, 40), st.floats(0, 0.9),
       st.integers(0, 2**32 - 1))
def test_prune_is_the_fixpoint_of_the_definition(n, graph, half, rate, seed):
    cfg = SecAggConfig(os.urandom(16), n, 1, 16, graph=graph, degree=2 * half if graph == "sparse" else None)
    server = ServerSession(cfg)
    server._graph = cfg.neighbour_graph(seed.to_bytes(32, "big"))  # as if phase 0 had closed with that members root
    rng = np.random.default_rng(seed)
    members = frozenset(p for p in range(1, n + 1) if rng.random() >= rate)
    assert server._prune(members) == _prune_by_passes(server, members)


def test_unmasking_reuses_coefficient_sets_along_the_ring(monkeypatch):
    computed: list[tuple[int, ...]] = []
    real = shamir.lagrange_at_zero
    monkeypatch.setattr(shamir, "lagrange_at_zero", lambda xs: computed.append(tuple(xs)) or real(xs))
    n = 400
    cfg = SecAggConfig(os.urandom(16), n, 3, 20, graph="sparse", degree=52)
    rng = np.random.default_rng(7)
    inputs = {p: rng.integers(0, 1 << 20, 3, dtype=np.uint64) for p in range(1, n + 1)}
    dropped = rng.choice(np.arange(1, n + 1), size=40, replace=False).tolist()
    drops = {Phase.MASKED_INPUT: set(dropped[:20]), Phase.UNMASKING: set(dropped[20:])}
    report = run_session(cfg, inputs, drops)
    assert report.result is not None
    assert np.array_equal(report.result.vector, expected_sum(inputs, report.sent_input, cfg.bits))
    secrets = n  # a self-mask seed per masked input (380), a mask key per party dropped after sharing keys (20)
    assert len(computed) <= secrets // 8, f"{len(computed)} coefficient sets for {secrets} secrets"
