"""Σ-protocols over the commitment group, in challenge–response form (the verifier recomputes every
announcement from the responses and the challenges, and the Fiat–Shamir hash over them must give the
challenge back), so a proof carries scalars only.

- OR proof (Cramer, Damgård, Schoenmakers, "Proofs of Partial Knowledge and Simplified Design of Witness
  Hiding Protocols", CRYPTO 1994): for a commitment P and public offsets O_0…O_{n−1}, knowledge of r with
  P − O_t = r·B for some t, without revealing t. Branch j's announcement is A_j = z_j·B − c_j·(P − O_j); the
  branch challenges c_j must sum to the proof's challenge c. The prover simulates every branch but t.
- Linear proof (Schnorr, generalised): knowledge of (y_0…y_{m−1}, w) with V = Σ y_i·G_i + w·B; the
  announcement is T = Σ z_i·G_i + s·B − c·V.

All sub-proofs of one contribution share one challenge c (parallel composition of special-sound
protocols with a common challenge is special sound).
"""

from __future__ import annotations

from dataclasses import dataclass

from secagg.randomness import RandomSource
from secagg.validity import group as g

Offset = bytes | None
"""A branch offset O_j: a point, or None for the identity (the branch "P = r·B")."""


def _shift(point: bytes, offset: Offset) -> bytes:
    return point if offset is None else g.sub(point, offset)


@dataclass
class OrProver:
    """An OR proof in progress: announcements made, waiting for the challenge."""

    shifted: list[bytes]
    true_branch: int
    witness: int
    nonce: int
    challenges: list[int]
    responses: list[int]
    announcements: list[bytes]

    @classmethod
    def start(cls, point: bytes, offsets: list[Offset], true_branch: int, witness: int, source: RandomSource) -> OrProver:
        shifted = [_shift(point, o) for o in offsets]
        n = len(offsets)
        cs, zs, ann = [0] * n, [0] * n, [b""] * n
        nonce = g.random_scalar(source)
        for j in range(n):
            if j == true_branch:
                ann[j] = g.mul_base(nonce)
            else:
                cs[j], zs[j] = g.random_scalar(source), g.random_scalar(source)
                ann[j] = g.sub(g.mul_base(zs[j]), g.mul(cs[j], shifted[j]))
        return cls(shifted, true_branch, witness, nonce, cs, zs, ann)

    def finish(self, challenge: int) -> tuple[list[int], list[int]]:
        t = self.true_branch
        others = sum(c for j, c in enumerate(self.challenges) if j != t)
        self.challenges[t] = (challenge - others) % g.ORDER
        self.responses[t] = (self.nonce + self.challenges[t] * self.witness) % g.ORDER
        return self.challenges, self.responses


def or_announcements(point: bytes, offsets: list[Offset], challenges: list[int], responses: list[int]) -> list[bytes]:
    """The verifier's recomputation of an OR proof's announcements."""
    return [
        g.sub(g.mul_base(z), g.mul(c, _shift(point, o))) for o, c, z in zip(offsets, challenges, responses)
    ]


def or_challenges_ok(challenges: list[int], challenge: int) -> bool:
    return sum(challenges) % g.ORDER == challenge


@dataclass
class LinearProver:
    """Knowledge of the opening (y, w) of V = Σ y_i·G_i + w·B, in progress."""

    values: list[int]
    blind: int
    nonces: list[int]
    blind_nonce: int
    announcement: bytes

    @classmethod
    def start(cls, generators: list[bytes], values: list[int], blind: int, source: RandomSource) -> LinearProver:
        nonces = [g.random_scalar(source) for _ in values]
        blind_nonce = g.random_scalar(source)
        ann = g.total([g.mul(a, gen) for a, gen in zip(nonces, generators)] + [g.mul_base(blind_nonce)])
        return cls(values, blind, nonces, blind_nonce, ann)

    def finish(self, challenge: int) -> tuple[list[int], int]:
        zs = [(a + challenge * y) % g.ORDER for a, y in zip(self.nonces, self.values)]
        return zs, (self.blind_nonce + challenge * self.blind) % g.ORDER


def linear_announcement(generators: list[bytes], point: bytes, challenge: int, responses: list[int], blind_response: int) -> bytes:
    """The verifier's recomputation of a linear proof's announcement T = Σ z_i·G_i + s·B − c·V."""
    terms = [g.mul(z, gen) for z, gen in zip(responses, generators)] + [g.mul_base(blind_response)]
    return g.sub(g.total(terms), g.mul(challenge, point))
