"""The bit-vector proof (`secagg.validity.layout`, `secagg.validity.proof`): the layout maps a contribution's bits
back to what the device masks; a proof of bits that are not bits, or that break a count or a relation, does not
verify; a batch of proofs gives each valid proof its commitment and finds exactly the invalid ones."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secagg.randomness import OsRandom, SeededRandom
from secagg.validity import Bits, InvalidProof, ProofContext, Ranged, Relation, Signs, Statement, commitment_of, prove
from secagg.validity.group import ORDER
from secagg.validity.layout import layout, witness
from secagg.validity.proof import _prove_bits, proof_size, verify, verify_batch
from tests.secagg.test_validity import statement_and_values

CTX = ProofContext(bytes(range(16)), "q", 2, 5, bytes(32))
FEW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FEW
@given(statement_and_values())
def test_the_layout_gives_back_the_masked_content_and_meets_every_constraint(case) -> None:  # type: ignore[no-untyped-def]
    statement, values, noise = case
    lay = layout(statement)
    bits = witness(statement, values, noise)
    assert len(bits) == lay.n and set(bits) <= {0, 1}
    content = list(lay.offsets)
    for k, (i, m) in enumerate(zip(lay.entry, lay.coef)):
        if i >= 0:
            content[i] += m * bits[k]
    e = noise or [0] * statement.dim
    assert content == [statement.encoding_scale * v + n for v, n in zip(values, e)]
    for terms, v in lay.constraints:
        assert sum(w * bits[k] for k, w in terms) == v
    assert proof_size(statement) == 32 * (6 + 2 + 2 * lay.n)


ONE_VOTE = Statement((Bits(4, 1),), 2, 3)
COUNTED = Statement((Bits(4, 2), Signs(1)))
LINKED = Statement((Ranged(1, 0, 100), Ranged(1, 0, 100)), 1, 0, (Relation(((0, 1), (1, -1)), 0, 100),))


def _bent(statement: Statement, values: list[int], noise: list[int] | None, at: int, digit: int) -> list[int]:
    bits = witness(statement, values, noise)
    bits[at] = digit % ORDER
    return bits


@pytest.mark.parametrize(("statement", "bits"), [
    (ONE_VOTE, _bent(ONE_VOTE, [0, 1, 0, 0], [0, 1, -1, 3], 1, 2)),  # a vote of 2
    (ONE_VOTE, _bent(ONE_VOTE, [0, 1, 0, 0], [0, 1, -1, 3], 0, 1)),  # two votes, the slack still 0
    (ONE_VOTE, _bent(ONE_VOTE, [0, 0, 0, 0], [0, 0, 0, 0], 4, -1)),  # a negative slack
    (ONE_VOTE, _bent(ONE_VOTE, [0, 0, 0, 0], [0, 0, 0, 0], 7, 5)),  # a noise digit of 5
    (COUNTED, _bent(COUNTED, [1, 1, 0, 0, 0], None, 2, 1)),  # three of at most two
    (COUNTED, _bent(COUNTED, [1, 0, 0, 0, -1], None, 7, 2)),  # a sign of ±2
    (LINKED, _bent(LINKED, [10, 10], None, 7, 1)),  # a first moment above its count (8 bits … 17)
    (LINKED, _bent(LINKED, [10, 10], None, 14, 1)),  # the relation's slack changed (0 → 1)
])
def test_a_proof_of_bits_that_break_the_statement_does_not_verify(statement: Statement, bits: list[int]) -> None:
    proof, _ = _prove_bits(statement, CTX, bits, SeededRandom(b"bent"))
    with pytest.raises(InvalidProof, match="does not verify"):
        verify(statement, CTX, proof)


def test_the_honest_bits_of_those_statements_verify() -> None:
    for statement, values, noise in ((ONE_VOTE, [0, 1, 0, 0], [0, 1, -1, 3]), (COUNTED, [1, 1, 0, 0, -1], None),
                                     (LINKED, [10, 10], None)):
        proof, blind = _prove_bits(statement, CTX, witness(statement, values, noise), SeededRandom(b"ok"))
        assert verify(statement, CTX, proof) == commitment_of(statement, values, noise, blind)


BATCH_STATEMENT = Statement((Bits(6, 1), Ranged(2, -3, 9)), 2, 4)


@pytest.fixture(scope="module")
def batch() -> list[tuple[ProofContext, bytes, bytes]]:
    """Twelve parties' proofs with their commitments."""
    out = []
    for party in range(12):
        ctx = ProofContext(CTX.session_id, "q", 2, party + 1, bytes(32))
        values = [int(party % 7 == j) for j in range(6)] + [party - 3, 9 - party]
        noise = [(party * j) % 9 - 4 for j in range(8)]
        proof, blind = prove(BATCH_STATEMENT, ctx, values, noise, SeededRandom(b"batch/%d" % party))
        out.append((ctx, proof, commitment_of(BATCH_STATEMENT, values, noise, blind)))
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sets(st.integers(0, 11), max_size=5), st.sampled_from(["flip", "swap", "replay"]))
def test_a_batch_finds_exactly_the_invalid_proofs(batch, bad: set[int], how: str) -> None:  # type: ignore[no-untyped-def]
    items = []
    for at, (ctx, proof, _) in enumerate(batch):
        if at in bad:
            if how == "flip":  # a scalar of l or r altered
                pos = 32 * 9 + at
                proof = proof[:pos] + bytes([proof[pos] ^ 1]) + proof[pos + 1 :]
            elif how == "swap":  # another party's proof (made for its context)
                proof = batch[(at + 1) % 12][1]
            else:  # its own proof presented by another party
                ctx = ProofContext(ctx.session_id, ctx.query_id, ctx.round, 99, ctx.task_digest)
        items.append((BATCH_STATEMENT, ctx, proof))
    results = verify_batch(items, OsRandom())
    for at, result in enumerate(results):
        if at in bad:
            assert isinstance(result, InvalidProof)
        else:
            assert result == batch[at][2]


def test_a_malformed_proof_in_a_batch_is_refused_alone(batch) -> None:  # type: ignore[no-untyped-def]
    items = [(BATCH_STATEMENT, ctx, proof) for ctx, proof, _ in batch[:4]]
    items[2] = (BATCH_STATEMENT, items[2][1], items[2][2][:-1])
    results = verify_batch(items)
    assert isinstance(results[2], InvalidProof) and "bytes, expected" in str(results[2])
    assert [r for i, r in enumerate(results) if i != 2] == [batch[i][2] for i in (0, 1, 3)]


def test_two_proofs_altered_to_cancel_each_other_are_both_refused(batch) -> None:  # type: ignore[no-untyped-def]
    """μ of one proof raised by δ, of another lowered by δ: with equal weights the batch equation would still sum to
    the identity; the verifier's random weights catch both (and bisection names exactly these two)."""
    (ctx1, p1, _), (ctx2, p2, _) = batch[0], batch[1]
    at = 32 * 7  # μ, the second scalar after the six points

    def shifted(proof: bytes, delta: int) -> bytes:
        mu = (int.from_bytes(proof[at : at + 32], "little") + delta) % ORDER
        return proof[:at] + mu.to_bytes(32, "little") + proof[at + 32 :]

    items = [(BATCH_STATEMENT, ctx1, shifted(p1, 12345)), (BATCH_STATEMENT, ctx2, shifted(p2, -12345))]
    items += [(BATCH_STATEMENT, ctx, proof) for ctx, proof, _ in batch[2:6]]
    results = verify_batch(items, OsRandom())
    assert [isinstance(r, InvalidProof) for r in results] == [True, True, False, False, False, False]
