"""Validity proofs (`secagg.validity`): completeness for every statement shape (hypothesis), soundness against
forged, altered and replayed proofs and cheating provers, the opening check, the limb encoding, and a secure
aggregation session that drops a party whose proof fails."""

from __future__ import annotations

import collections
import json

import os

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secagg import ClientSession, SecAggConfig, ServerSession
from secagg.errors import InvalidInputError
from secagg.phases import Phase
from secagg.randomness import SeededRandom
from secagg.validity import (
    LIMBS,
    Bits,
    InvalidProof,
    ProofContext,
    Ranged,
    Relation,
    Signs,
    Statement,
    StatementError,
    blind_limbs,
    commitment_of,
    limbs_value,
    opening_holds,
    proof_size,
    prove,
    verify,
)
from secagg.validity import group
from secagg.validity.statement import decompose, range_weights
from tests.bent_device import _unchecked_prove

TASK = bytes(range(32, 64))
CTX = ProofContext(bytes(range(16)), "q1", 0, 3, TASK)
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def statement_and_values(draw: st.DrawFn) -> tuple[Statement, list[int], list[int] | None]:
    segments, values = [], []
    for _ in range(draw(st.integers(1, 3))):
        size = draw(st.integers(1, 5))
        shape = draw(st.sampled_from(["one_hot", "bits", "counted", "signs", "range"]))
        if shape == "one_hot":
            seg, vals = Bits(size, 1), [0] * size
            hot = draw(st.integers(-1, size - 1))
            if hot >= 0:
                vals[hot] = 1
        elif shape in ("bits", "counted"):
            m = size if shape == "bits" else draw(st.integers(1, size))
            vals = draw(st.lists(st.integers(0, 1), min_size=size, max_size=size).filter(lambda v: sum(v) <= m))
            seg = Bits(size, m)
        elif shape == "signs":
            seg, vals = Signs(size), draw(st.lists(st.integers(-1, 1), min_size=size, max_size=size))
        else:
            low = draw(st.integers(-50, 50))
            high = low + draw(st.integers(0, 300))
            seg, vals = Ranged(size, low, high), draw(st.lists(st.integers(low, high), min_size=size, max_size=size))
        segments.append(seg)
        values += vals
    bound = draw(st.sampled_from([0, 0, 1, 7, 40]))
    ranged = Statement(tuple(segments)).ranged_indices()
    relations = []
    for _ in range(draw(st.integers(0, 2)) if ranged else 0):
        picked = draw(st.lists(st.sampled_from(ranged), min_size=1, max_size=4, unique=True))
        terms = tuple((i, draw(st.sampled_from([-2, -1, 1, 3]))) for i in picked)
        total = sum(coef * values[i] for i, coef in terms)
        relations.append(Relation(terms, total - draw(st.integers(0, 40)), total + draw(st.integers(0, 40))))
    statement = Statement(tuple(segments), draw(st.sampled_from([1, 4])), bound, tuple(relations))
    noise = draw(st.lists(st.integers(-bound, bound), min_size=len(values), max_size=len(values))) if bound else None
    return statement, values, noise


@FEW
@given(statement_and_values(), st.binary(min_size=1, max_size=8))
def test_honest_proofs_verify_and_commit_to_the_masked_content(case, seed: bytes) -> None:  # type: ignore[no-untyped-def]
    statement, values, noise = case
    proof, blind = prove(statement, CTX, values, noise, SeededRandom(seed))
    assert len(proof) == proof_size(statement)
    assert verify(statement, CTX, proof) == commitment_of(statement, values, noise, blind)


@given(statement_and_values())
def test_a_statement_survives_its_json_form(case) -> None:  # type: ignore[no-untyped-def]
    statement = case[0]
    back = Statement.from_json(json.loads(json.dumps(statement.to_json())))
    assert back == statement and back.encode() == statement.encode()


@pytest.mark.parametrize(("width", "value"), [(w, v) for w in (1, 2, 5, 8, 100, 255, 256) for v in (0, 1, w // 2, w - 1, w)])
def test_range_decomposition_reaches_exactly_0_to_width(width: int, value: int) -> None:
    bits = decompose(value, width)
    assert all(b in (0, 1) for b in bits)
    assert sum(w * b for w, b in zip(range_weights(width), bits)) == value
    assert sum(range_weights(width)) == width


@pytest.mark.parametrize(("statement", "values", "noise"), [
    (Statement((Bits(4, 1),)), [1, 1, 0, 0], None),
    (Statement((Bits(4, 2),)), [1, 1, 1, 0], None),
    (Statement((Bits(4, 4),)), [0, 2, 0, 0], None),
    (Statement((Signs(3),)), [0, 2, 0], None),
    (Statement((Ranged(2, 0, 10),)), [0, 11], None),
    (Statement((Bits(2, 1),), 1, 5), [0, 1], [0, 6]),
])
def test_the_prover_refuses_an_invalid_contribution(statement: Statement, values: list[int], noise: list[int] | None) -> None:
    with pytest.raises(ValueError):
        prove(statement, CTX, values, noise, SeededRandom(b"p"))


LINKED = Statement((Ranged(2, 0, 100), Ranged(3, 0, 100)), 1, 0,
                   (Relation(((0, 1), (1, -1)), 0, 100), Relation(((2, 1), (3, 1), (4, 1)), 0, 100)))
"""feature_stats' shape: a first moment (entry 1) at most its count (entry 0); bins (2..4) adding up to at most 100."""


@pytest.mark.parametrize("values", [[10, 11, 0, 0, 0], [0, 100, 0, 0, 0], [50, 20, 40, 40, 40], [0, 0, 100, 0, 1]])
def test_a_contribution_that_breaks_a_relation_is_refused_and_cannot_be_bent_past_it(values: list[int]) -> None:
    """Every entry within its range, a relation broken (a first moment above its count, bins summing past the
    bound): the honest prover refuses; a prover with its checks off makes a proof that does not verify, or whose
    commitment does not open to the bent vector."""
    assert LINKED.check(values) is not None and "relation" in str(LINKED.check(values))
    with pytest.raises(ValueError, match="relation"):
        prove(LINKED, CTX, values, None, SeededRandom(b"r"))
    proof, blind = _unchecked_prove(LINKED, CTX, values, None, SeededRandom(b"cheat"))
    try:
        k = verify(LINKED, CTX, proof)
    except InvalidProof:
        return
    assert not opening_holds([k], values, blind)


def test_relations_verify_bind_the_statement_and_refuse_bad_shapes() -> None:
    values = [30, 30, 10, 0, 90]
    proof, blind = prove(LINKED, CTX, values, None, SeededRandom(b"linked"))
    assert verify(LINKED, CTX, proof) == commitment_of(LINKED, values, None, blind)
    unlinked = Statement(LINKED.segments, 1, 0)
    assert LINKED.encode().startswith(unlinked.encode()) and LINKED.encode() != unlinked.encode()
    loose = Statement(LINKED.segments, 1, 0, (Relation(((0, 1), (1, -1)), 0, 100), Relation(((2, 1), (3, 1), (4, 1)), 0, 101)))
    with pytest.raises(InvalidProof):
        verify(loose, CTX, proof)  # another bound: another statement
    for bad in ((), ((0, 1), (0, 1)), ((5, 1),), ((0, 0),), ((0, 1 << 16),)):
        with pytest.raises(StatementError, match="relation 0"):
            Statement(LINKED.segments, 1, 0, (Relation(bad, 0, 1),))
    with pytest.raises(StatementError, match="outside the ranged"):
        Statement((Bits(2, 1), Ranged(1, 0, 3)), 1, 0, (Relation(((0, 1),), 0, 1),))
    with pytest.raises(StatementError, match="empty or too wide"):
        Statement(LINKED.segments, 1, 0, (Relation(((0, 1),), 5, 4),))


STATEMENT = Statement((Bits(6, 1), Signs(2)), 2, 3)
VALUES, NOISE = [0, 0, 1, 0, 0, 0, -1, 1], [3, -3, 0, 1, 2, -1, 0, 0]


def test_a_proof_is_bound_to_its_context_and_statement() -> None:
    proof, _ = prove(STATEMENT, CTX, VALUES, NOISE, SeededRandom(b"ctx"))
    verify(STATEMENT, CTX, proof)
    for other in (ProofContext(bytes(16), "q1", 0, 3, TASK), ProofContext(CTX.session_id, "q2", 0, 3, TASK),
                  ProofContext(CTX.session_id, "q1", 1, 3, TASK), ProofContext(CTX.session_id, "q1", 0, 4, TASK),
                  ProofContext(CTX.session_id, "q1", 0, 3, bytes(32)),
                  ProofContext(CTX.session_id, "q1", 0, 3, TASK[::-1]), ProofContext(CTX.session_id, "q1", 0, 3)):
        with pytest.raises(InvalidProof, match="does not verify"):
            verify(STATEMENT, other, proof)  # replayed into another session, query, round, party or task
    # The context encodes the digest length-prefixed after the party: no two contexts share an encoding.
    assert CTX.encode().endswith(len(TASK).to_bytes(2, "big") + TASK)
    for other_statement in (Statement(STATEMENT.segments, 3, 3), Statement((Signs(6), Bits(2, 1)), 2, 3)):
        if proof_size(other_statement) == len(proof):
            with pytest.raises(InvalidProof, match="does not verify"):
                verify(other_statement, CTX, proof)  # same shape, another statement (scale, segments)
        else:
            with pytest.raises(InvalidProof, match="expected"):
                verify(other_statement, CTX, proof)


def test_altered_or_forged_proofs_are_refused() -> None:
    proof, _ = prove(STATEMENT, CTX, VALUES, NOISE, SeededRandom(b"alter"))
    rng = np.random.default_rng(0)
    for pos in sorted({0, 31, 32, 40, len(proof) // 2, len(proof) - 1, *rng.integers(0, len(proof), 20).tolist()}):
        bad = bytearray(proof)
        bad[pos] ^= 1 << int(rng.integers(0, 8))
        with pytest.raises(InvalidProof):
            verify(STATEMENT, CTX, bytes(bad))
    for forged in (os.urandom(len(proof)), proof[:-1], proof + b"\0", b""):
        with pytest.raises(InvalidProof):
            verify(STATEMENT, CTX, forged)
    # a non-canonical scalar (value + ℓ) is not a second encoding of the same proof
    at = 32 * 6  # τ_x, the first scalar after the six points
    c = int.from_bytes(proof[at : at + 32], "little") + group.ORDER
    if c < 1 << 256:
        with pytest.raises(InvalidProof, match="canonical"):
            verify(STATEMENT, CTX, proof[:at] + c.to_bytes(32, "little") + proof[at + 32 :])


@pytest.mark.parametrize("bent", [[1, 1, 0, 0, 0, 0, 0, 0], [1000, 0, 0, 0, 0, 0, 0, 0], [-1, 0, 0, 0, 0, 0, 0, 0],
                                  [0, 0, 0, 0, 0, 0, 2, 0]])
def test_a_cheating_prover_cannot_open_its_commitment_to_a_bent_vector(bent: list[int]) -> None:
    """A prover with its checks switched off still only proves what the commitment holds: the bent vector is not
    what K commits to, so the sum including it fails the opening check."""
    proof, blind = _unchecked_prove(STATEMENT, CTX, bent, NOISE, SeededRandom(b"cheat"))
    try:
        k = verify(STATEMENT, CTX, proof)
    except InvalidProof:
        return  # refused outright
    masked = [STATEMENT.encoding_scale * v + e for v, e in zip(bent, NOISE)]
    assert not opening_holds([k], masked, blind)


def test_noise_beyond_the_bound_cannot_be_opened() -> None:
    noise = [100] + NOISE[1:]
    proof, blind = _unchecked_prove(STATEMENT, CTX, VALUES, noise, SeededRandom(b"noise"))
    k = verify(STATEMENT, CTX, proof)
    masked = [STATEMENT.encoding_scale * v + e for v, e in zip(VALUES, noise)]
    assert not opening_holds([k], masked, blind)


def test_the_sum_opens_the_product_of_commitments() -> None:
    ks, content, blinds = [], np.zeros(STATEMENT.dim, dtype=np.int64), 0
    for party in range(1, 5):
        ctx = ProofContext(CTX.session_id, "q1", 0, party)
        vals = [0] * 6 + [1, -1]
        vals[party] = 1
        proof, blind = prove(STATEMENT, ctx, vals, NOISE, SeededRandom(bytes([party])))
        ks.append(verify(STATEMENT, ctx, proof))
        content += STATEMENT.encoding_scale * np.array(vals) + np.array(NOISE)
        blinds += blind
    limbs = np.sum([blind_limbs(b % group.ORDER) for b in [blinds % group.ORDER]], axis=0)
    assert opening_holds(ks, content.tolist(), limbs_value(limbs.tolist()))
    assert not opening_holds(ks[:-1], content.tolist(), blinds % group.ORDER)  # a contributor left out
    altered = content.copy()
    altered[0] += 1
    assert not opening_holds(ks, altered.tolist(), blinds % group.ORDER)
    assert not opening_holds(ks, content.tolist(), (blinds + 1) % group.ORDER)


@given(st.lists(st.integers(0, group.ORDER - 1), min_size=1, max_size=40))
@settings(deadline=None)  # group arithmetic on a loaded machine can pass hypothesis' 200 ms deadline
def test_summed_limbs_give_the_summed_blinding(blinds: list[int]) -> None:
    limbs = np.sum([blind_limbs(b) for b in blinds], axis=0)
    assert len(limbs) == LIMBS and int(limbs.max()) < len(blinds) << 16
    assert limbs_value(limbs.tolist()) == sum(blinds) % group.ORDER


def test_a_session_drops_the_party_whose_proof_fails() -> None:
    statement = Statement((Bits(3, 1),))
    cfg = SecAggConfig(session_id=bytes(range(16)), n=4, dim=3 + LIMBS, bits=24)
    commitments: dict[int, bytes] = {}

    def validator(party: int, proof: bytes) -> None:
        try:
            commitments[party] = verify(statement, ProofContext(cfg.session_id, "q", 0, party, TASK), proof)
        except InvalidProof as exc:
            raise InvalidInputError(str(exc)) from None

    server = ServerSession(cfg, input_validator=validator, task_digest=TASK)
    clients, expected = {}, np.zeros(3, dtype=np.int64)
    for p in range(1, 5):
        x = [0, 0, 0]
        x[p % 3] = 1
        ctx = ProofContext(cfg.session_id, "q", 0, 1 if p == 4 else p, TASK)
        proof, blind = prove(statement, ctx, x, None, SeededRandom(bytes([p])))
        vec = np.array(x + blind_limbs(blind), dtype=np.uint64)
        clients[p] = ClientSession(cfg, p, vec, randomness=SeededRandom(bytes([p, 1])), input_proof=proof,
                                   task_digest=TASK)
        if p != 4:
            expected += x
    msgs = {p: c.start() for p, c in clients.items()}
    while server.phase is not Phase.DONE:
        for p, m in msgs.items():
            try:
                server.receive(p, m)
            except InvalidInputError:
                assert p == 4 and server.phase is Phase.MASKED_INPUT  # party 4 replayed party 1's proof
        out = server.close_phase()
        msgs = {p: clients[p].receive(m) for p, m in out.items()}
    assert server.result is not None and server.result.contributors == frozenset({1, 2, 3})
    assert 4 in server.refused
    total = server.result.vector.astype(np.int64)
    assert total[:3].tolist() == expected.tolist()
    assert opening_holds([commitments[p] for p in (1, 2, 3)], total[:3].tolist(), limbs_value(total[3:].tolist()))


class _CountingSodium:
    """nacl.bindings with every call counted by name (the curve operations a prover runs)."""

    def __init__(self, real: Any) -> None:
        self.real, self.calls = real, collections.Counter[str]()

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.real, name)

        def counted(*args: Any) -> Any:
            self.calls[name] += 1
            return fn(*args)

        return counted


@pytest.mark.parametrize(("statement", "witnesses", "noise"), [
    (Statement((Signs(3),)), [[-1, -1, -1], [0, 0, 0], [1, 1, 1], [1, 0, -1]], None),
    (Statement((Bits(5, 1),)), [[0, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 1]], None),
    (Statement((Bits(4, 2),)), [[0, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 1]], None),
    (Statement((Ranged(2, -7, 9),), 3, 6), [[-7, -7], [9, 9], [0, 1]], [[6, -6], [0, 0], [-1, 5]]),
])
def test_proving_runs_the_same_curve_operations_whatever_the_contribution(
    monkeypatch: pytest.MonkeyPatch, statement: Statement, witnesses: list[list[int]], noise: list[list[int]] | None
) -> None:
    """What a device proves must not show in how long proving takes: the same libsodium calls, as many of each, for
    every valid vector of a statement (a −1 vote or a 1 bit used to cost a scalar multiplication more)."""
    prove(statement, CTX, witnesses[0], noise[0] if noise else None, SeededRandom(b"warm"))  # generators cached
    counting = _CountingSodium(group._na)
    monkeypatch.setattr(group, "_na", counting)
    seen = []
    for i, values in enumerate(witnesses):
        counting.calls.clear()
        prove(statement, CTX, values, noise[i] if noise else None, SeededRandom(b"ops"))
        seen.append(dict(counting.calls))
    assert all(ops == seen[0] for ops in seen), seen
