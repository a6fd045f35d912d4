"""Signed tree heads and witness cosignatures.

A tree head says: the log named `origin` held `size` entries whose RFC 9162 root is `root`, at `timestamp_ms`.
The log signs it with Ed25519 under a key of its own (never a request-signing or issuer key); a witness
cosigns a head it has checked to be consistent with every head it cosigned before. Both sign text in the
style of the C2SP checkpoint and cosignature notes:

    head message        = "fa-log-head/v1\\n" ‖ origin "\\n" ‖ size "\\n" ‖ base64(root) "\\n" ‖ timestamp_ms "\\n"
    cosignature message = "fa-log-cosignature/v1\\n" ‖ "time " seconds "\\n" ‖ head message

Keys are named by `key_id` = hex(SHA-256("fa-log-key/v1\\n" ‖ public key)[:8]), so a verifier holding several
pinned keys (a rotation, several witnesses) knows which one a signature claims.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from fa_common.b64 import b64e
from translog.merkle import HASH_SIZE

HEAD_DOMAIN = b"fa-log-head/v1\n"
COSIGNATURE_DOMAIN = b"fa-log-cosignature/v1\n"
KEY_DOMAIN = b"fa-log-key/v1\n"
MAX_ORIGIN = 200


class HeadError(ValueError):
    """A tree head or cosignature that does not verify, or is malformed; the message says which."""


def key_id(public_key: bytes) -> str:
    if len(public_key) != 32:
        raise HeadError(f"public key: must be 32 bytes (Ed25519), got {len(public_key)}")
    return hashlib.sha256(KEY_DOMAIN + public_key).digest()[:8].hex()


@dataclass(frozen=True)
class TreeHead:
    origin: str
    size: int
    root: bytes
    timestamp_ms: int

    def __post_init__(self) -> None:
        if not self.origin or len(self.origin) > MAX_ORIGIN or "\n" in self.origin:
            raise HeadError(f"origin: 1..{MAX_ORIGIN} characters without a newline")
        if not 0 <= self.size < 1 << 53:
            raise HeadError(f"size: must be in 0..2^53, got {self.size}")
        if len(self.root) != HASH_SIZE:
            raise HeadError(f"root: must be {HASH_SIZE} bytes, got {len(self.root)}")
        if not 0 <= self.timestamp_ms < 1 << 53:
            raise HeadError(f"timestamp_ms: must be in 0..2^53, got {self.timestamp_ms}")

    def message(self) -> bytes:
        root = b64e(self.root)
        return HEAD_DOMAIN + f"{self.origin}\n{self.size}\n{root}\n{self.timestamp_ms}\n".encode()


@dataclass(frozen=True)
class SignedHead:
    head: TreeHead
    key_id: str
    signature: bytes


@dataclass(frozen=True)
class Cosignature:
    witness: str
    key_id: str
    time: int
    """Unix seconds at which the witness checked the head."""
    signature: bytes


def cosignature_message(head: TreeHead, time: int) -> bytes:
    return COSIGNATURE_DOMAIN + f"time {time}\n".encode() + head.message()


class Signer:
    """An Ed25519 key that signs tree heads (the log's) or cosignatures (a witness's)."""

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise HeadError(f"signing key: must be a 32-byte Ed25519 seed, got {len(seed)} bytes")
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        self.public_key = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key_id = key_id(self.public_key)

    def sign_head(self, head: TreeHead) -> SignedHead:
        return SignedHead(head, self.key_id, self._key.sign(head.message()))

    def cosign(self, name: str, head: TreeHead, time: int) -> Cosignature:
        return Cosignature(name, self.key_id, time, self._key.sign(cosignature_message(head, time)))


def key_table(public_keys: Iterable[bytes]) -> dict[str, bytes]:
    """key_id → public key, for the keys a verifier pins."""
    return {key_id(k): k for k in public_keys}


def _verify(keys: dict[str, bytes], kid: str, signature: bytes, message: bytes, what: str) -> None:
    key = keys.get(kid)
    if key is None:
        raise HeadError(f"{what}: signed by key {kid[:16]!r}, which is not one of the {len(keys)} pinned")
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(signature, message)
    except InvalidSignature:
        raise HeadError(f"{what}: the signature does not verify under key {kid}") from None


def verify_head(signed: SignedHead, keys: dict[str, bytes]) -> None:
    """Raise HeadError unless one of the pinned log keys (`key_table`) signed the head."""
    _verify(keys, signed.key_id, signed.signature, signed.head.message(), f"tree head of size {signed.head.size}")


def verify_cosignature(cosig: Cosignature, head: TreeHead, witnesses: dict[str, bytes]) -> None:
    """Raise HeadError unless a pinned witness key cosigned the head."""
    _verify(witnesses, cosig.key_id, cosig.signature, cosignature_message(head, cosig.time),
            f"cosignature by {cosig.witness[:40]!r} of the head of size {head.size}")


__all__ = ["Cosignature", "HeadError", "SignedHead", "Signer", "TreeHead", "cosignature_message", "key_id",
           "key_table", "verify_cosignature", "verify_head"]
