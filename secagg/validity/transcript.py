"""The Fiat–Shamir transcript of a validity proof.

The challenge is SHA-512 over length-prefixed, labelled fields reduced modulo ℓ. It binds the context (the
query, round, cohort session id, the task digest and party), the statement (what the vector must satisfy, the encoding scale
and the noise bound), every commitment and every announcement, so a proof made for one party, cohort, round
or statement does not verify for another.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from secagg.validity.group import ORDER

DOMAIN = b"fa-validity/v3/transcript"


@dataclass(frozen=True)
class ProofContext:
    """Who proves what, where: the public values every proof is bound to."""

    session_id: bytes
    """The cohort's 16-byte secure-aggregation session id (the cohort id is its hex)."""
    query_id: str
    round: int
    party: int
    task_digest: bytes = bytes(32)
    """The device's own digest of its task (queries/task_digest.py): a proof made for another task does not verify."""

    def encode(self) -> bytes:
        q = self.query_id.encode("utf-8")
        return (
            struct.pack(">H", len(self.session_id)) + self.session_id + struct.pack(">H", len(q)) + q
            + struct.pack(">QI", self.round, self.party) + struct.pack(">H", len(self.task_digest)) + self.task_digest
        )


class Transcript:
    def __init__(self, context: ProofContext, statement: bytes) -> None:
        self._h = hashlib.sha512()
        self.append(b"domain", DOMAIN)
        self.append(b"context", context.encode())
        self.append(b"statement", statement)

    def append(self, label: bytes, data: bytes) -> None:
        self._h.update(struct.pack(">H", len(label)) + label + struct.pack(">I", len(data)) + data)

    def challenge(self) -> int:
        return int.from_bytes(self._h.copy().digest(), "little") % ORDER
