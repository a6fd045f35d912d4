"""Cryptographic building blocks, all from the `cryptography` package.

- X25519 key agreement; HKDF-SHA256 with domain-separated info (version, purpose, binding, party ids).
- AES-256-GCM share transport; the associated data binds the session, the task, sender and receiver.
- Ed25519 signatures (signing with `cryptography`, verifying with libsodium through PyNaCl) over each party's advertised keys (every threat model) and the survivor set (active).

The *binding* is the 16-byte session id followed by the 32-byte task digest (`queries.task_digest`: what the
device was asked to compute, hashed by the device itself), so two devices shown different tasks derive keys
that do not match and sign payloads that do not verify for each other (`binding()`). From the share keys on it also
carries the *members root* (`members_root`: every member's party, identity and advertised keys, as the server
fixed them when it closed phase 0), which also seeds the neighbour graph (`graph_seed`): devices shown different
member lists derive different keys, and the graph follows from keys the server could not know in advance.
- The mask PRG: AES-256-CTR keyed by a full 256-bit derived key, its keystream written straight into
  the memory of the integer vector (`cryptography`'s `update_into`), no general-purpose RNG anywhere.

Private keys are built from 32 bytes of an injected `RandomSource` (OS entropy by default).
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
from typing import TYPE_CHECKING

import nacl.bindings
import nacl.exceptions
import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from secagg.errors import DecryptionError, SignatureError
from secagg.randomness import OsRandom, RandomSource

if TYPE_CHECKING:
    from secagg.meter import Meter

DOMAIN = b"fa-secagg/v3/"
TASK_DIGEST_BYTES = 32
NO_TASK = bytes(TASK_DIGEST_BYTES)
"""The task digest of a session that binds no task (protocol tests and benchmarks outside the service)."""
KEY_BYTES = 32
_ZERO_IV = bytes(16)
_RAW = serialization.Encoding.Raw


def x25519_keypair(source: RandomSource | None = None) -> tuple[X25519PrivateKey, bytes]:
    """A key pair whose private scalar is 32 bytes of `source` (X25519 clamps any 32 bytes to a valid key)."""
    sk = X25519PrivateKey.from_private_bytes((source or OsRandom()).bytes(KEY_BYTES))
    return sk, sk.public_key().public_bytes(_RAW, serialization.PublicFormat.Raw)


def x25519_private_bytes(sk: X25519PrivateKey) -> bytes:
    return sk.private_bytes(_RAW, serialization.PrivateFormat.Raw, serialization.NoEncryption())


def x25519_public_of(private_raw: bytes) -> bytes:
    sk = X25519PrivateKey.from_private_bytes(private_raw)
    return sk.public_key().public_bytes(_RAW, serialization.PublicFormat.Raw)


def ed25519_public_bytes(sk: Ed25519PrivateKey) -> bytes:
    return sk.public_key().public_bytes(_RAW, serialization.PublicFormat.Raw)


def binding(session_id: bytes, task_digest: bytes = NO_TASK) -> bytes:
    """What every derived key, associated data and signature of a session is bound to: session id ‖ task digest."""
    if len(task_digest) != TASK_DIGEST_BYTES:
        raise ValueError(f"task_digest: must be {TASK_DIGEST_BYTES} bytes, got {len(task_digest)}")
    return session_id + task_digest


def _pair_info(purpose: bytes, bind: bytes, u: int, v: int) -> bytes:
    lo, hi = (u, v) if u < v else (v, u)
    return DOMAIN + purpose + b"/" + bind + struct.pack(">II", lo, hi)


def hkdf(secret: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(secret)


def agree(sk: X25519PrivateKey, peer_public: bytes) -> bytes:
    """Raw X25519 shared secret; rejects low-order peer keys (the library raises on all-zero output)."""
    try:
        return sk.exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError as exc:
        raise DecryptionError(f"unusable peer public key: {exc}") from None


def channel_key(shared: bytes, bind: bytes, u: int, v: int) -> bytes:
    return hkdf(shared, _pair_info(b"channel", bind, u, v))


def pair_mask_key(shared: bytes, bind: bytes, u: int, v: int) -> bytes:
    return hkdf(shared, _pair_info(b"pairmask", bind, u, v))


def self_mask_key(seed: bytes, bind: bytes, u: int) -> bytes:
    return hkdf(seed, DOMAIN + b"selfmask/" + bind + struct.pack(">I", u))


MEMBER_LEAF_BYTES = 16
"""A member leaf is SHA-256 truncated to 128 bits: a server would need a second preimage of an honest member's leaf
(2^128 work) to show another entry in its place; colliding two entries of its own gains it nothing."""
ABSENT_LEAF = bytes(MEMBER_LEAF_BYTES)
"""The leaf of a party that did not advertise keys in phase 0."""


def member_leaf(party: int, identity: bytes, c_pk: bytes, s_pk: bytes) -> bytes:
    """One member of the members list: party id, identity key (32 zero bytes in sessions without identities) and its
    two advertised public keys."""
    return hashlib.sha256(DOMAIN + b"member/" + struct.pack(">I", party) + identity + c_pk + s_pk).digest()[
        :MEMBER_LEAF_BYTES]


def members_root(leaves: bytes) -> bytes:
    """The members root over the leaves of parties 1..n, in order (`ABSENT_LEAF` for a party that did not advertise)."""
    if len(leaves) % MEMBER_LEAF_BYTES:
        raise ValueError(f"leaves: a multiple of {MEMBER_LEAF_BYTES} bytes, got {len(leaves)}")
    return hashlib.sha256(DOMAIN + b"members/" + struct.pack(">I", len(leaves) // MEMBER_LEAF_BYTES) + leaves).digest()


def graph_seed(bind: bytes, root: bytes) -> bytes:
    """The neighbour graph's seed: the session binding and the members root (no value the server picks alone)."""
    return hkdf(root, DOMAIN + b"graph/" + bind)


def round_binding(bind: bytes, root: bytes) -> bytes:
    """The binding of everything after phase 0: session id ‖ task digest ‖ members root."""
    if len(root) != 32:
        raise ValueError(f"root: must be 32 bytes, got {len(root)}")
    return bind + root


def share_aad(bind: bytes, sender: int, receiver: int) -> bytes:
    return DOMAIN + b"share/" + bind + struct.pack(">II", sender, receiver)


def _nonce(sender: int) -> bytes:
    # Each channel key carries exactly one message per direction, so the sender id is a unique nonce.
    return struct.pack(">4sI4x", b"shr0", sender)


def seal_share(key: bytes, bind: bytes, sender: int, receiver: int, plaintext: bytes) -> bytes:
    return AESGCM(key).encrypt(_nonce(sender), plaintext, share_aad(bind, sender, receiver))


def open_share(key: bytes, bind: bytes, sender: int, receiver: int, ciphertext: bytes) -> bytes:
    try:
        return AESGCM(key).decrypt(_nonce(sender), ciphertext, share_aad(bind, sender, receiver))
    except InvalidTag:
        raise DecryptionError(f"share ciphertext from party {sender} failed authentication") from None


def sign(sk: Ed25519PrivateKey, payload: bytes) -> bytes:
    return sk.sign(payload)


def verify(public_raw: bytes, signature: bytes, payload: bytes, what: str) -> None:
    """Ed25519 verification with libsodium (PyNaCl): about half the cost of building a key object per signature,
    which matters to a device checking a few hundred peers."""
    remember = len(payload) <= MEMO_PAYLOAD_MAX and os.environ.get(BENCH_EVERY_VERIFY_ENV) != "1"
    valid = (_remembered_verdict if remember else _verdict)(public_raw, signature, payload)
    if not valid:
        raise SignatureError(f"invalid signature on {what}")


MEMO_SIZE, MEMO_PAYLOAD_MAX = 4096, 256
"""Verdicts on short payloads (the keys payloads) remembered per process. Verification is a pure function of the
three byte strings, so a verdict looked up for the very same bytes is the verdict libsodium would give again. It
spares a process running many devices (the fleet simulator: each peer's keys are checked by each of its ~100
neighbours) all but the first check; a real device, checking each peer once, pays a dictionary lookup. At most
4,096 entries of ≤ 352 bytes."""

BENCH_EVERY_VERIFY_ENV = "FA_BENCH_EVERY_VERIFY"
"""`FA_BENCH_EVERY_VERIFY=1`: this process checks every signature as if it were one device (the benchmarks set it:
their simulated devices' verification costs must be what a real device pays)."""


def _verdict(public_raw: bytes, signature: bytes, payload: bytes) -> bool:
    if len(public_raw) != 32 or len(signature) != 64:
        return False
    try:
        nacl.bindings.crypto_sign_open(signature + payload, public_raw)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError):
        return False
    return True


_remembered_verdict = functools.lru_cache(maxsize=MEMO_SIZE)(_verdict)


def keys_payload(c_pk: bytes, s_pk: bytes) -> bytes:
    """What a party signs when it advertises its fresh keys (with its check-in or in phase 0): that they are its own.
    Session-free, so it can be made before the party is seated; a peer checks it before encrypting any share to the
    keys (the server cannot slip keys of its own into a neighbourhood, not even for a peer it then reports dropped)."""
    return DOMAIN + b"keys/" + c_pk + s_pk


def advertise_payload(bind: bytes, party: int, c_pk: bytes, s_pk: bytes) -> bytes:
    """What a party signs with its identity key: (session, task digest, party, its two public keys)."""
    return DOMAIN + b"advertise/" + bind + struct.pack(">I", party) + c_pk + s_pk


def consistency_payload(bind: bytes, survivors_bitmap: bytes) -> bytes:
    return DOMAIN + b"consistency/" + bind + survivors_bitmap


class MaskStream:
    """Expands 256-bit keys into mask vectors with AES-256-CTR, reusing one zero buffer and one scratch.

    Instances hold only buffers (no key material between calls). `dtype` is uint32 when the modulus
    2^bits divides 2^32, else uint64: arithmetic then wraps for free and needs half the keystream.
    """

    def __init__(self, dim: int, dtype: np.dtype, meter: Meter | None = None) -> None:
        from secagg.meter import NullMeter

        self.dim = dim
        self._meter = meter or NullMeter()
        self.dtype = np.dtype(dtype)
        self.nbytes = dim * self.dtype.itemsize
        self._zeros = bytes(self.nbytes)
        self._scratch = np.empty(self.nbytes + 16, dtype=np.uint8)
        self.bytes_generated = 0

    def expand(self, key: bytes) -> np.ndarray:
        """The mask for `key`, as a view into the scratch buffer (valid until the next call)."""
        with self._meter.measure("prg", self.nbytes):
            enc = Cipher(algorithms.AES(key), modes.CTR(_ZERO_IV)).encryptor()
            enc.update_into(self._zeros, self._scratch.data)  # `.data`: the memoryview `update_into` is typed for
        self.bytes_generated += self.nbytes
        return self._scratch[: self.nbytes].view(self.dtype)

    def add_into(self, acc: np.ndarray, key: bytes, sign: int) -> None:
        mask = self.expand(key)
        if sign > 0:
            np.add(acc, mask, out=acc)
        else:
            np.subtract(acc, mask, out=acc)


def prg_uint64(seed: bytes, count: int) -> np.ndarray:
    """`count` pseudorandom uint64 values from a 32-byte seed (AES-256-CTR keystream)."""
    key = hkdf(seed, DOMAIN + b"prg-uint64")
    buf = np.empty(count * 8 + 16, dtype=np.uint8)
    Cipher(algorithms.AES(key), modes.CTR(_ZERO_IV)).encryptor().update_into(bytes(count * 8), buf.data)
    return buf[: count * 8].view(np.uint64).copy()


def aes_ctr_throughput_probe(nbytes: int, source: RandomSource | None = None) -> int:
    """Encrypts `nbytes` of zeros with a throwaway key; used by the benchmark as the raw AES-CTR rate."""
    out = np.empty(nbytes + 16, dtype=np.uint8)
    key = (source or OsRandom()).bytes(KEY_BYTES)
    Cipher(algorithms.AES(key), modes.CTR(_ZERO_IV)).encryptor().update_into(bytes(nbytes), out.data)
    return nbytes
