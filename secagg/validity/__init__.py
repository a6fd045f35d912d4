"""Validity proofs for secure aggregation: each device proves, in zero knowledge, that the vector it masks is
a valid contribution, and the unmasked sum must open the product of the commitments.

Pure library (no I/O), in the manner of ACORN (Bell, Gascón, Lepoint, Li, Meiklejohn, Raykova, Yun,
"ACORN: Input Validation for Secure Aggregation", USENIX Security 2023) and RoFL (Burkhalter, Lycklama,
Viand, Küchler, Hithnawi, "RoFL: Robustness of Secure Federated Learning"): Pedersen commitments in the
Ed25519 prime-order group (libsodium through PyNaCl), one Bulletproofs-style bit-vector proof per contribution
(non-interactive with Fiat–Shamir, batch-verified across a cohort), and the commitment blinding folded into the
masked vector. See docs/validation.md.
"""

from secagg.validity.proof import InvalidProof, commitment_of, opening_holds, proof_size, prove, verify, verify_batch
from secagg.validity.statement import LIMB_BITS, LIMBS, Bits, Ranged, Relation, Signs, Statement, StatementError, blind_limbs, limbs_value
from secagg.validity.transcript import ProofContext

__all__ = [
    "LIMBS", "LIMB_BITS", "Bits", "InvalidProof", "ProofContext", "Ranged", "Relation", "Signs", "Statement", "StatementError",
    "blind_limbs", "commitment_of", "limbs_value", "opening_holds", "proof_size", "prove", "verify", "verify_batch",
]
