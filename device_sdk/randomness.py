"""The device's one source of randomness and what it derives from it.

`DeviceRandomness(root)` wraps a `secagg.randomness.RandomSource`: OS entropy by default, a `SeededRandom`
in tests (and in `fa-sim --seeded-randomness`). Everything random a device does comes from it:
- its Ed25519 identity key when the store has none (`identity_key`: 32 bytes of child "identity");
- its identity token request (`enrolment`: child "enrolment": the token nonce, the PSS salt and the blind,
  docs/identities.md);
- request-signing nonces (`nonce`: 16 bytes of child "nonces" as unpadded base64url);
- the secagg keys sent ahead with each check-in (`checkin_keys`: child "checkin-keys", 64 bytes per check-in,
  `secagg.client.KeyPairs.draw`);
- per contribution (`for_contribution(cohort_id)`), below the child "contribution/<cohort id>":
  `secagg` (its child "secagg": the ClientSession's X25519 keys, self-mask seed and Shamir coefficients),
  `noise` (an AES-CTR stream keyed by 32 bytes of its child "noise": the DP noise share, a bulk draw that
  `os.urandom` serves an order of magnitude slower) and `kind` (a numpy Generator seeded from its child
  "kind": row subsampling, shuffles, stochastic rounding — never keys, masks or noise) and `validity` (its
  child "validity": the commitment blindings and proof nonces of a validity proof, docs/validation.md).
With OsRandom every child is fresh OS entropy. With a seeded root every value is reproducible and depends
only on the seed and the cohort id, not on the order in which a fleet's devices happen to run; such a
device also repeats its nonces, so it may only ever meet a fresh server.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np

from queries.kind import contribution_generator
from secagg.randomness import ByteSource, OsRandom, RandomSource, keyed_stream

NONCE_BYTES = 16


@dataclass(frozen=True)
class ContributionRandomness:
    """The independent sub-sources of one contribution."""

    secagg: RandomSource
    noise: ByteSource
    kind: np.random.Generator
    validity: RandomSource


class DeviceRandomness:
    def __init__(self, root: RandomSource | None = None) -> None:
        self.root = root or OsRandom()
        self._nonces = self.root.child("nonces")
        self._checkin_keys = self.root.child("checkin-keys")

    def identity_key(self) -> bytes:
        """32 bytes for a new Ed25519 identity key."""
        return self.root.child("identity").bytes(32)

    def enrolment(self) -> RandomSource:
        """The stream an identity token request draws its nonce, salt and blind from."""
        return self.root.child("enrolment")

    def nonce(self) -> str:
        """A request-signing nonce: 16 random bytes as unpadded base64url (22 characters)."""
        return base64.urlsafe_b64encode(self._nonces.bytes(NONCE_BYTES)).rstrip(b"=").decode("ascii")

    def checkin_keys(self) -> RandomSource:
        """The stream the key pairs sent with check-ins are drawn from (fresh pairs for every check-in)."""
        return self._checkin_keys

    def for_contribution(self, cohort_id: str) -> ContributionRandomness:
        base = self.root.child(f"contribution/{cohort_id}")
        return ContributionRandomness(
            secagg=base.child("secagg"),
            noise=keyed_stream(base.child("noise")),
            kind=contribution_generator(base.child("kind")),
            validity=base.child("validity"),
        )


__all__ = ["ContributionRandomness", "DeviceRandomness"]
