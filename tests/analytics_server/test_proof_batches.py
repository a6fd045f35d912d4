"""The server checks a cohort's proofs in batches (`CohortValidation.preverify`): inputs that arrive while a batch
is being checked go together in the next one; each party gets its own verdict — a valid proof its commitment, an
invalid one its refusal — whatever else is in its batch."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from analytics_server import validation
from secagg.errors import InvalidInputError
from secagg.messages import MaskedInputProved
from secagg.randomness import SeededRandom
from secagg.validity import Bits, ProofContext, Statement, commitment_of, prove

STATEMENT = Statement((Bits(8, 1),), 2, 3)
SESSION = bytes(range(16))


def _message(party: int, proof: bytes) -> bytes:
    return MaskedInputProved(SESSION, party, 8, 1, bytes(1), proof).encode()


async def test_arrivals_are_checked_in_batches_with_a_verdict_each(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = validation.CohortValidation(STATEMENT, "q", 0, SESSION)
    sizes: list[int] = []
    real = validation.verify_batch

    def spy(items: Any, *args: Any) -> Any:
        sizes.append(len(items))
        return real(items, *args)

    monkeypatch.setattr(validation, "verify_batch", spy)
    proofs, expected = {}, {}
    for party in range(1, 41):
        values = [int(party % 9 == j) for j in range(8)]
        noise = [(party + j) % 7 - 3 for j in range(8)]
        ctx = ProofContext(SESSION, "q", 0, party)
        proof, blind = prove(STATEMENT, ctx, values, noise, SeededRandom(b"%d" % party))
        proofs[party], expected[party] = proof, commitment_of(STATEMENT, values, noise, blind)
    cheats = {7: proofs[8], 23: proofs[23][:-32] + bytes(32)}  # another party's proof; a zeroed scalar
    with ThreadPoolExecutor(2) as pool:
        await asyncio.gather(*(checks.preverify(p, _message(p, cheats.get(p, proofs[p])), pool) for p in proofs))
    assert sum(sizes) == 40 and len(sizes) < 40 and max(sizes) > 1  # batched, each proof once
    for party in proofs:
        if party in cheats:
            with pytest.raises(InvalidInputError, match=f"party {party}: validity proof refused"):
                checks.validator(party, cheats[party])
        else:
            checks.validator(party, proofs[party])
            assert checks.commitments[party] == expected[party]
    sizes.clear()
    await checks.preverify(5, _message(5, proofs[5]), None)  # known already: not checked again
    assert sizes == []


async def test_a_batch_holds_at_most_max_batch_bits_of_statements(monkeypatch: pytest.MonkeyPatch) -> None:
    """Big statements make small batches: a batch keeps every proof's per-bit scalars until it is checked."""
    from secagg.validity.layout import layout

    checks = validation.CohortValidation(STATEMENT, "q", 0, SESSION)
    monkeypatch.setattr(validation, "MAX_BATCH_BITS", 3 * layout(STATEMENT).n)
    sizes: list[int] = []
    real = validation.verify_batch
    monkeypatch.setattr(validation, "verify_batch", lambda items, *a: sizes.append(len(items)) or real(items, *a))
    proofs = {p: prove(STATEMENT, ProofContext(SESSION, "q", 0, p), [0] * 8, [0] * 8, SeededRandom(b"%d" % p))[0]
              for p in range(1, 11)}
    with ThreadPoolExecutor(2) as pool:
        await asyncio.gather(*(checks.preverify(p, _message(p, proof), pool) for p, proof in proofs.items()))
    assert sum(sizes) == 10 and max(sizes) == 3
