"""The log's JSON shapes (pydantic), shared by the server's routes, the device SDK and auditors.

Hashes, keys and signatures are standard base64. Every list an outsider sends is bounded.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fa_common.b64 import b64d, b64e
from translog.heads import MAX_ORIGIN, Cosignature, HeadError, SignedHead, TreeHead
from translog.merkle import MAX_PROOF_HASHES, ProofError

MAX_ENTRIES_PAGE = 1000
MAX_COSIGNATURES = 16


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


def _b64(text: str, what: str, length: int | None = None) -> bytes:
    """`b64d` raising HeadError (what the log's checks catch)."""
    try:
        return b64d(text, what, length)
    except ValueError as exc:
        raise HeadError(str(exc)) from None


class HeadModel(_Model):
    origin: str = Field(min_length=1, max_length=MAX_ORIGIN)
    size: int = Field(ge=0, lt=1 << 53)
    root: str = Field(max_length=64, description="base64 of the 32-byte RFC 9162 root")
    timestamp_ms: int = Field(ge=0, lt=1 << 53)
    key_id: str = Field(min_length=16, max_length=16, description="the log key's id (translog.heads.key_id)")
    signature: str = Field(max_length=100, description="base64 Ed25519 signature of the head message")

    def parse(self) -> SignedHead:
        head = TreeHead(self.origin, self.size, _b64(self.root, "head.root", 32), self.timestamp_ms)
        return SignedHead(head, self.key_id, _b64(self.signature, "head.signature", 64))

    @classmethod
    def of(cls, signed: SignedHead) -> HeadModel:
        h = signed.head
        return cls(origin=h.origin, size=h.size, root=b64e(h.root), timestamp_ms=h.timestamp_ms, key_id=signed.key_id,
                   signature=b64e(signed.signature))


class CosignatureModel(_Model):
    witness: str = Field(min_length=1, max_length=100)
    key_id: str = Field(min_length=16, max_length=16)
    time: int = Field(ge=0, lt=1 << 53)
    signature: str = Field(max_length=100)

    def parse(self) -> Cosignature:
        return Cosignature(self.witness, self.key_id, self.time, _b64(self.signature, "cosignature.signature", 64))

    @classmethod
    def of(cls, c: Cosignature) -> CosignatureModel:
        return cls(witness=c.witness, key_id=c.key_id, time=c.time, signature=b64e(c.signature))


def hashes(proof: list[str], what: str) -> list[bytes]:
    if len(proof) > MAX_PROOF_HASHES:
        raise ProofError(f"{what}: {len(proof)} hashes, at most {MAX_PROOF_HASHES}")
    return [_b64(h, what, 32) for h in proof]


class WitnessedHead(_Model):
    """A head witnesses cosigned, and the consistency proof from it to the head a proof bundle is under."""

    head: HeadModel
    cosignatures: list[CosignatureModel] = Field(default_factory=list, max_length=MAX_COSIGNATURES)
    consistency: list[str] = Field(default_factory=list, max_length=MAX_PROOF_HASHES)


class TaskProof(_Model):
    """What a device gets with an assignment: the cohort's `task` entry at `index`, the log's newest signed
    head, the entry's inclusion proof under it, the consistency proof from the head the device last saw
    (`from_size`, as it said in its check-in), and — when witnesses cosign — the newest cosigned head."""

    index: int = Field(ge=0, lt=1 << 53)
    entry: dict[str, Any]
    head: HeadModel
    inclusion: list[str] = Field(default_factory=list, max_length=MAX_PROOF_HASHES)
    from_size: int | None = Field(default=None, ge=0, lt=1 << 53)
    consistency: list[str] = Field(default_factory=list, max_length=MAX_PROOF_HASHES)
    witnessed: WitnessedHead | None = None


class LogHeadResponse(_Model):
    """`GET /v1/log/head`."""

    head: HeadModel
    cosignatures: list[CosignatureModel] = Field(default_factory=list)
    witnessed: HeadModel | None = Field(default=None, description="the newest head witnesses cosigned, if not this one")
    witnessed_cosignatures: list[CosignatureModel] = Field(default_factory=list)


class LogKeyResponse(_Model):
    """`GET /v1/log/key`."""

    origin: str
    public_key: str
    key_id: str
    previous_keys: list[str] = Field(default_factory=list, description="base64 public keys of retired log keys")
    witnesses: dict[str, str] = Field(default_factory=dict, description="witness key id → base64 public key")


class LogEntryModel(_Model):
    index: int
    entry: dict[str, Any]


class LogEntriesResponse(_Model):
    """`GET /v1/log/entries?start=&end=`."""

    size: int
    entries: list[LogEntryModel]


class LogHeadsResponse(_Model):
    """`GET /v1/log/heads?start=&end=`: the stored signed heads with start ≤ size < end."""

    heads: list[HeadModel]


class ProofResponse(_Model):
    """`GET /v1/log/proof/inclusion` and `/v1/log/proof/consistency`."""

    proof: list[str]


class CosignRequest(CosignatureModel):
    """`POST /v1/log/cosignatures`: a witness's cosignature of the stored head of `size`."""

    size: int = Field(ge=0, lt=1 << 53)


b64 = b64e
"""Kept only for `analyst_client/witness.py` (another change is editing it); import `fa_common.b64`."""

__all__ = ["CosignRequest", "CosignatureModel", "HeadModel", "LogEntriesResponse", "LogEntryModel", "LogHeadResponse",
           "LogHeadsResponse", "LogKeyResponse", "MAX_COSIGNATURES", "MAX_ENTRIES_PAGE", "ProofResponse", "TaskProof",
           "WitnessedHead", "b64", "hashes"]
