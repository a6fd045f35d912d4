"""Property tests: for random cohorts, bit widths, graphs, threat models, task digests and drop sets in every
phase, the server's output is exactly the sum of the inputs of the parties that sent their masked input
(mod 2^bits), or a typed abort exactly when too few parties remain. Sessions are signed and verified as the
service runs them (every party signs its keys bound to the task digest and checks its senders'); task binding
under disagreement: test_task_binding.py."""

from __future__ import annotations

import copy
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secagg import AbortError, ClientSession, SecAggConfig, ServerSession
from secagg.crypto import ed25519_public_bytes
from secagg.phases import Phase
from secagg.simulate import PROTOCOL_PHASES, expected_sum, run_session

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def sessions(draw, graphs=("complete", "sparse")):
    n = draw(st.integers(2, 60))
    bits = draw(st.integers(1, 62))
    dim = draw(st.integers(1, 24))
    graph = draw(st.sampled_from(graphs))
    threat = draw(st.sampled_from(["semi_honest", "active"]))
    cfg = SecAggConfig(os.urandom(16), n, dim, bits, graph=graph, threat_model=threat)
    seed = draw(st.integers(0, 2**32 - 1))
    digest = draw(st.binary(min_size=32, max_size=32))
    rng = np.random.default_rng(seed)
    inputs = {p: rng.integers(0, 1 << bits, dim, dtype=np.uint64) for p in range(1, n + 1)}
    remaining = list(range(1, n + 1))
    drops: dict[Phase, set[int]] = {}
    for phase in PROTOCOL_PHASES:
        rate = draw(st.sampled_from([0.0, 0.0, 0.05, 0.15, 0.4]))
        k = int(rng.binomial(len(remaining), rate))
        chosen = set(rng.choice(remaining, size=k, replace=False).tolist()) if k else set()
        drops[phase] = chosen
        remaining = [p for p in remaining if p not in chosen]
    return cfg, inputs, drops, digest


def _applicable(cfg: SecAggConfig) -> list[Phase]:
    return [ph for ph in PROTOCOL_PHASES if cfg.active or ph is not Phase.CONSISTENCY_CHECK]


@SETTINGS
@given(sessions())
def test_sum_is_exact_or_typed_abort(case):
    cfg, inputs, drops, digest = case
    report = run_session(cfg, inputs, drops, task_digest=digest)
    if report.abort is not None:
        assert isinstance(report.abort, AbortError)
        assert report.abort.have < report.abort.needed
        assert report.result is None
        return
    result = report.result
    assert result.contributors == report.sent_input
    assert len(result.contributors) >= cfg.survivor_threshold
    assert np.array_equal(result.vector, expected_sum(inputs, result.contributors, cfg.bits))
    # Parties dropped before their masked input never count; all who sent it do.
    before_input = drops[Phase.ADVERTISE_KEYS] | drops[Phase.SHARE_KEYS] | drops[Phase.MASKED_INPUT]
    assert not result.contributors & before_input


@SETTINGS
@given(sessions(graphs=("complete",)))
def test_complete_graph_aborts_exactly_when_below_threshold(case):
    """With the complete graph every neighbourhood is the whole cohort, so the oracle is simple: the
    session succeeds iff at least t parties remain after every phase it runs."""
    cfg, inputs, drops, digest = case
    report = run_session(cfg, inputs, drops, task_digest=digest, signed=digest[0] % 2 == 0)
    alive = set(inputs)
    enough = True
    for phase in _applicable(cfg):
        alive -= drops[phase]
        enough &= len(alive) >= cfg.share_threshold
    assert (report.abort is None) == enough, report.abort
    if enough:
        survivors = set(inputs) - drops[Phase.ADVERTISE_KEYS] - drops[Phase.SHARE_KEYS] - drops[Phase.MASKED_INPUT]
        assert report.result.contributors == survivors


def test_sparse_graph_above_complete_max_tolerates_drops_everywhere():
    n, dim, bits = 160, 8, 24
    cfg = SecAggConfig(os.urandom(16), n, dim, bits)  # graph="auto" → sparse above 100 parties
    assert not cfg.uses_complete_graph and cfg.resolved_degree < n - 1
    rng = np.random.default_rng(7)
    inputs = {p: rng.integers(0, 1 << bits, dim, dtype=np.uint64) for p in range(1, n + 1)}
    drops = {ph: {1 + 5 * i + k for i in range(4)} for k, ph in enumerate(PROTOCOL_PHASES)}
    report = run_session(cfg, inputs, drops)
    assert report.abort is None
    assert np.array_equal(report.result.vector, expected_sum(inputs, report.result.contributors, bits))
    assert len(report.result.contributors) == n - 12


def test_neighbourhoods_are_symmetric_and_recomputable():
    sid = os.urandom(16)
    a = SecAggConfig(sid, 300, 4, 16).neighbour_graph
    b = SecAggConfig(sid, 300, 4, 16).neighbour_graph
    for u in range(1, 301):
        nu = a.closed(u)
        assert nu == b.closed(u) and u in nu and len(nu) == a.size()
        assert all(u in a.closed(v) for v in nu)
    other = SecAggConfig(os.urandom(16), 300, 4, 16).neighbour_graph
    assert any(a.closed(u) != other.closed(u) for u in range(1, 301))


def test_too_many_drops_abort_with_the_phase_named():
    n = 10
    cfg = SecAggConfig(os.urandom(16), n, 3, 8)
    inputs = {p: np.zeros(3, dtype=np.uint64) for p in range(1, n + 1)}
    report = run_session(cfg, inputs, {Phase.MASKED_INPUT: {1, 2, 3, 4, 5}})
    assert isinstance(report.abort, AbortError)
    assert report.abort.phase == "masked_input" and report.abort.needed == cfg.share_threshold
    assert "masked_input" in str(report.abort)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), st.randoms(use_true_random=False))
def test_close_ready_holds_exactly_when_closing_loses_nothing(case, order):
    """`ServerSession.close_ready` (which lets the server close a phase before its deadline) holds after an
    answer exactly when closing the phase with the answers so far neither aborts nor prunes a party that
    answered, in every phase, whatever the graph, drops and arrival order; a session closed when ready yields
    the exact sum over the parties that sent their masked input."""
    cfg, inputs, drops, digest = case
    identities = {p: Ed25519PrivateKey.generate() for p in inputs}
    public_ids = {p: ed25519_public_bytes(k) for p, k in identities.items()}
    clients = {p: ClientSession(cfg, p, v, identities[p], public_ids, task_digest=digest) for p, v in inputs.items()}
    server = ServerSession(cfg, public_ids, task_digest=digest)
    outgoing = {p: c.start() for p, c in clients.items() if p not in drops[Phase.ADVERTISE_KEYS]}
    while True:
        phase, answers = server.phase, list(outgoing.items())
        order.shuffle(answers)
        assert not server.close_ready() or server.config.survivor_threshold == 0
        for i, (p, msg) in enumerate(answers):
            server.receive(p, msg)
            trial = copy.deepcopy(server)
            try:
                trial.close_phase()
                kept_all = trial.survivors(phase) == server.received() if phase is not Phase.UNMASKING else True
            except AbortError:
                kept_all = False
            assert server.close_ready() == kept_all, (phase.label, i + 1, len(answers))
            if kept_all and trial.result is not None:
                assert np.array_equal(trial.result.vector, expected_sum(inputs, trial.result.contributors, cfg.bits))
        try:
            delivered = server.close_phase()
        except AbortError:
            return
        if server.phase is Phase.DONE:
            return
        outgoing = {p: clients[p].receive(m) for p, m in delivered.items() if p not in drops.get(server.phase, ())}
