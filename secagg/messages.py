"""Typed, versioned protocol messages and their length-checked binary codec.

Every message starts with a 24-byte header: magic "SA", version, message type, the 16-byte session id
and the sender (client messages) or recipient (server messages) party id. Counts are bounded by the
bytes actually present before anything is allocated, and trailing bytes are an error.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar

import numpy as np

from secagg.crypto import MEMBER_LEAF_BYTES
from secagg.errors import MessageFormatError
from secagg.identity_token import TOKEN_BYTES
from secagg.shamir import SHARE_BYTES

MAGIC = b"SA"
VERSION = 3
HEADER = struct.Struct(">2sBB16sI")
_U32 = struct.Struct(">I")
_SHARE_ENTRY = struct.Struct(f">IB{SHARE_BYTES}s")
"""One unmask share: owner of the secret (u32), ShareKind (u8), the share."""
KEY = 32
SIG = 64


class MsgType(IntEnum):
    ADVERTISE_KEYS = 1
    SHARE_KEYS = 2
    MASKED_INPUT = 3
    CONSISTENCY_SIGNATURE = 4
    UNMASK_SHARES = 5
    MASKED_INPUT_PROVED = 6
    PEER_KEYS = 11
    ROUTED_SHARES = 12
    CONSISTENCY_REQUEST = 13
    UNMASK_REQUEST = 14


class ShareKind(IntEnum):
    SELF_MASK_SEED = 1  # b_v: revealed when v sent its masked input
    MASK_KEY = 2  # s_v^SK: revealed when v dropped after sharing keys


_SHARE_KINDS = frozenset(int(k) for k in ShareKind)


class _Reader:
    def __init__(self, data: bytes, offset: int) -> None:
        self.data = memoryview(data)
        self.pos = offset

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise MessageFormatError(f"{what}: truncated message")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def u8(self, what: str) -> int:
        if self.pos + 1 > len(self.data):
            raise MessageFormatError(f"{what}: truncated message")
        self.pos += 1
        return self.data[self.pos - 1]

    def u32(self, what: str) -> int:
        if self.pos + 4 > len(self.data):
            raise MessageFormatError(f"{what}: truncated message")
        value: int
        (value,) = _U32.unpack_from(self.data, self.pos)
        self.pos += 4
        return value

    def count(self, entry_size: int, what: str) -> int:
        n = self.u32(what)
        if n * entry_size > len(self.data) - self.pos:
            raise MessageFormatError(f"{what}: count {n} exceeds the message length")
        return n

    def blob(self, what: str) -> bytes:
        return self.take(self.count(1, what), what)

    def finish(self) -> None:
        if self.pos != len(self.data):
            raise MessageFormatError(f"{len(self.data) - self.pos} trailing bytes")


def _u32(v: int) -> bytes:
    return _U32.pack(v)


def _blob(b: bytes) -> bytes:
    return _U32.pack(len(b)) + b


_PAIR_HEAD = struct.Struct(">II")
"""Head of one (party, ciphertext) entry of ShareKeys and RoutedShares: the party, the ciphertext's length."""


def _encode_pairs(pairs: tuple[tuple[int, bytes], ...]) -> bytes:
    out = [_U32.pack(len(pairs))]
    for v, ct in pairs:
        out += (_PAIR_HEAD.pack(v, len(ct)), ct)
    return b"".join(out)


def _parse_pairs(r: _Reader, who: str) -> tuple[tuple[int, bytes], ...]:
    n = r.count(8, "ciphertexts")
    fast = _uniform_records(r, n, lambda size: struct.Struct(f">II{size}s"), _PAIR_HEAD, 1, 8)
    if fast is not None:
        return tuple((v, ct) for v, _, ct in fast)
    return tuple((r.u32(who), r.blob("ciphertext")) for _ in range(n))


def _uniform_records(r: _Reader, n: int, record: Callable[[int], struct.Struct], head: struct.Struct,
                     length_field: int, fixed: int) -> list[tuple[Any, ...]] | None:
    """Fast path for `n` entries that all carry the first entry's variable length (as every message a
    client builds does): one `iter_unpack` instead of a read per field. None — the caller then parses
    entry by entry, with the same result and the same errors — when the lengths differ or the bytes run out.
    `head` unpacks the first entry's fixed part, whose field `length_field` is the variable length;
    `record(size)` is the struct of one whole entry (`fixed` + size bytes)."""
    if n == 0 or r.pos + head.size > len(r.data):
        return None
    size = head.unpack_from(r.data, r.pos)[length_field]
    span = n * (fixed + size)
    if r.pos + span > len(r.data):
        return None
    entries = list(record(size).iter_unpack(r.data[r.pos : r.pos + span]))
    if any(e[length_field] != size for e in entries):
        return None
    r.pos += span
    return entries


@dataclass(frozen=True)
class Message:
    TYPE: ClassVar[MsgType]
    session_id: bytes
    party: int
    """Sender for client messages, recipient for server messages."""

    def header(self) -> bytes:
        return HEADER.pack(MAGIC, VERSION, self.TYPE, self.session_id, self.party)

    def encode(self) -> bytes:
        return self.header() + self.body()

    def body(self) -> bytes:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    @classmethod
    def parse(cls, session_id: bytes, party: int, r: _Reader) -> Message:  # pragma: no cover
        raise NotImplementedError


@dataclass(frozen=True)
class AdvertiseKeys(Message):
    """A party's two fresh X25519 public keys and its identity key's signature over them (`crypto.keys_payload`:
    session-free, so keys sent ahead with a check-in carry it too; empty only in sessions without identities). The
    party signs its keys again bound to session and task with its share keys (`ShareKeys.signature`)."""

    TYPE = MsgType.ADVERTISE_KEYS
    c_pk: bytes
    s_pk: bytes
    signature: bytes = b""

    def body(self) -> bytes:
        return self.c_pk + self.s_pk + _blob(self.signature)

    @classmethod
    def parse(cls, sid: bytes, party: int, r: _Reader) -> AdvertiseKeys:
        return cls(sid, party, r.take(KEY, "c_pk"), r.take(KEY, "s_pk"), _signature(r))


_PEER_HEAD = struct.Struct(f">I{KEY}s{KEY}s{KEY}sI")
"""Fixed part of one PeerKeys entry: party, identity key, c_pk, s_pk, the key signature's length (then the signature,
then the identity token as a blob)."""


@dataclass(frozen=True)
class PeerEntry:
    """A neighbour as the server fixed it when phase 0 closed: its identity key (32 zero bytes in sessions without
    identities), its advertised keys and their signature, and its issuer token (empty when the cohort has none)."""

    party: int
    identity: bytes
    c_pk: bytes
    s_pk: bytes
    signature: bytes = b""
    token: bytes = b""

    def encode(self) -> bytes:
        return (_PEER_HEAD.pack(self.party, self.identity, self.c_pk, self.s_pk, len(self.signature)) + self.signature
                + _blob(self.token))


def encode_peer_keys(session_id: bytes, party: int, entries: Sequence[bytes], leaves: bytes) -> bytes:
    """PeerKeys from already-encoded entries (`PeerEntry.encode()`) and the members list's leaves: lets the server
    encode each party's entry and the leaves once and join them into the messages of all its neighbours."""
    return b"".join((HEADER.pack(MAGIC, VERSION, MsgType.PEER_KEYS, session_id, party), _U32.pack(len(entries)),
                     *entries, _U32.pack(len(leaves) // MEMBER_LEAF_BYTES), leaves))


@dataclass(frozen=True)
class PeerKeys(Message):
    """The recipient's neighbours that advertised keys, and the members list: one `MEMBER_LEAF_BYTES` leaf per party
    1..n (`secagg.crypto.member_leaf`, zeros for a party that did not advertise), from which every member computes the
    members root — the seed of the neighbour graph and part of every later binding."""

    TYPE = MsgType.PEER_KEYS
    peers: tuple[PeerEntry, ...]
    leaves: bytes = b""

    def body(self) -> bytes:
        return b"".join([_U32.pack(len(self.peers)), *(p.encode() for p in self.peers),
                         _U32.pack(len(self.leaves) // MEMBER_LEAF_BYTES), self.leaves])

    @classmethod
    def parse(cls, sid: bytes, party: int, r: _Reader) -> PeerKeys:
        n = r.count(_PEER_HEAD.size + 4, "peers")
        peers = []
        for _ in range(n):
            v, identity, c_pk, s_pk, size = _PEER_HEAD.unpack(r.take(_PEER_HEAD.size, "peer"))
            if size not in (0, SIG):
                raise MessageFormatError("signature: must be empty or 64 bytes")
            sig = r.take(size, "signature")
            token = r.blob("token")
            if len(token) not in (0, TOKEN_BYTES):
                raise MessageFormatError(f"token: must be empty or {TOKEN_BYTES} bytes")
            peers.append(PeerEntry(v, identity, c_pk, s_pk, sig, token))
        count = r.count(MEMBER_LEAF_BYTES, "leaves")
        return cls(sid, party, tuple(peers), r.take(count * MEMBER_LEAF_BYTES, "leaves"))


_MEMBER = struct.Struct(f">I{KEY}s{KEY}s{KEY}s{SIG}s")
"""One member-list entry: party, its identity key, c_pk, s_pk, its signature over the advertised keys."""


@dataclass(frozen=True)
class MemberEntry:
    """A cohort member outside the recipient's neighbourhood, as it signed its keys for this session and task:
    lets a device count verified members beyond the neighbours it exchanges shares with (SecAgg+)."""

    party: int
    identity: bytes
    c_pk: bytes
    s_pk: bytes
    signature: bytes

    def encode(self) -> bytes:
        return _MEMBER.pack(self.party, self.identity, self.c_pk, self.s_pk, self.signature)


MAX_MEMBERS_WANTED = 1 << 20


@dataclass(frozen=True)
class ShareKeys(Message):
    """The party's encrypted shares for its peers, its signature (identity key) over its advertised keys bound to
    session and task (`crypto.advertise_payload`; empty only in sessions without identities), and how many
    signed members beyond its neighbourhood it asks to see with the routed shares (0: none)."""

    TYPE = MsgType.SHARE_KEYS
    ciphertexts: tuple[tuple[int, bytes], ...]  # (receiver, AES-GCM ciphertext)
    signature: bytes = b""
    members_wanted: int = 0

    def body(self) -> bytes:
        return _blob(self.signature) + _u32(self.members_wanted) + _encode_pairs(self.ciphertexts)

    @classmethod
    def parse(cls, sid: bytes, party: int, r: _Reader) -> ShareKeys:
        sig = _signature(r)
        wanted = r.u32("members_wanted")
        if wanted > MAX_MEMBERS_WANTED:
            raise MessageFormatError(f"members_wanted: {wanted} exceeds {MAX_MEMBERS_WANTED}")
        return cls(sid, party, _parse_pairs(r, "receiver"), sig, wanted)


@dataclass(frozen=True)
class RoutedShares(Message):
    """The ciphertexts addressed to the recipient, the signed member entries it asked for and, in sessions whose
    members hold identity tokens (docs/identities.md), each member's token (same order) in an optional trailing section
    (the senders' tokens came with the peer keys). No sender's signature: a share that opens under the channel key
    bound to the session, task and members root is what proves its sender agreed to them (docs/secagg.md, "Devices
    that check the server")."""

    TYPE = MsgType.ROUTED_SHARES
    ciphertexts: tuple[tuple[int, bytes], ...]  # (sender, ciphertext)
    members: tuple[MemberEntry, ...] = ()
    member_tokens: tuple[bytes, ...] = ()

    def body(self) -> bytes:
        return b"".join([
            _encode_pairs(self.ciphertexts), _u32(len(self.members)), *(m.encode() for m in self.members),
            _token_section([_blob(t) for t in self.member_tokens]),
        ])

    @classmethod
    def parse(cls, sid: bytes, party: int, r: _Reader) -> RoutedShares:
        cts = _parse_pairs(r, "sender")
        m = r.count(_MEMBER.size, "members")
        members = tuple(MemberEntry(*e) for e in _MEMBER.iter_unpack(r.take(m * _MEMBER.size, "members")))
        if r.pos == len(r.data):
            return cls(sid, party, cts, members)
        return cls(sid, party, cts, members, _tokens(r, "member_tokens", len(members)))


def _token_section(member_tokens: Sequence[bytes]) -> bytes:
    """The optional trailing token section of RoutedShares (tokens already encoded as blobs); empty without any."""
    if not member_tokens:
        return b""
    return b"".join((_u32(len(member_tokens)), *member_tokens))


def _tokens(r: _Reader, what: str, expected: int) -> tuple[bytes, ...]:
    n = r.count(4 + TOKEN_BYTES, what)
    if n != expected:
        raise MessageFormatError(f"{what}: {n} tokens for {expected} entries")
    out = tuple(r.blob(what) for _ in range(n))
    if any(len(t) != TOKEN_BYTES for t in out):
        raise MessageFormatError(f"{what}: a token must be {TOKEN_BYTES} bytes")
    return out


def encode_routed(session_id: bytes, party: int, pairs: Sequence[bytes], members: Sequence[bytes],
                  member_tokens: Sequence[bytes] = ()) -> bytes:
    """RoutedShares from already-encoded parts (each pair as `_PAIR_HEAD` ‖ ciphertext, each token as a blob, each
    member entry once per cohort), the server's fast path."""
    return b"".join((
        HEADER.pack(MAGIC, VERSION, MsgType.ROUTED_SHARES, session_id, party), _U32.pack(len(pairs)), *pairs,
        _U32.pack(len(members)), *members, _token_section(member_tokens),
    ))


def encode_pair(party: int, ciphertext: bytes) -> bytes:
    return _PAIR_HEAD.pack(party, len(ciphertext)) + ciphertext


def encode_blob(data: bytes) -> bytes:
    return _blob(data)


@dataclass(frozen=True)
class MaskedInput(Message):
    TYPE = MsgType.MASKED_INPUT
    bits: int
    dim: int
    packed: bytes

    def body(self) -> bytes:
        return bytes([self.bits]) + _u32(self.dim) + self.packed

    @classmethod
    def parse(cls, sid: bytes, party: int, r: _Reader) -> MaskedInput:
        bits, dim = r.u8("bits"), r.u32("dim")
        return cls(sid, party, bits, dim, r.take(len(r.data) - r.pos, "vector"))


@dataclass(frozen=True)
class MaskedInputProved(Message):
    """The masked input of a cohort that validates contributions: the packed vector (exactly
    ⌈dim·bits/8⌉ bytes, its blinding limbs included) then a length-prefixed validity proof
    (`secagg.validity`), at most MAX_PROOF_BYTES."""

    TYPE = MsgType.MASKED_INPUT_PROVED
    bits: int
    dim: int
    packed: bytes
    proof: bytes

    def body(self) -> bytes:
        return bytes([self.bits]) + _u32(self.dim) + self.packed + _blob(self.proof)

    @classmethod
    def parse(cls, sid: bytes, party: int, r: _Reader) -> MaskedInputProved:
        bits, dim = r.u8("bits"), r.u32("dim")
        if not 1 <= bits <= 64:
            raise MessageFormatError(f"bits: {bits} is not a bit width")
        packed = r.take((dim * bits + 7) // 8, "vector")
        proof = r.blob("proof")
        if len(proof) > MAX_PROOF_BYTES:
            raise MessageFormatError(f"proof: {len(proof)} bytes, more than {MAX_PROOF_BYTES}")
        return cls(sid, party, bits, dim, packed, proof)


MAX_PROOF_BYTES = 1 << 26
"""Largest validity proof any message may carry (a cohort's own limit, from its statement, is lower)."""


def encode_bitmap(members: frozenset[int] | set[int], n: int) -> bytes:
    out = bytearray((n + 7) // 8)
    outside = sorted(p for p in members if not 1 <= p <= n)
    if outside:
        raise MessageFormatError(f"survivors: party ids {outside[:5]} are outside 1..{n}")
    for p in members:
        out[(p - 1) >> 3] |= 1 << ((p - 1) & 7)
    return _u32(n) + bytes(out)


def decode_bitmap(data: bytes, n: int) -> frozenset[int]:
    if len(data) != 4 + (n + 7) // 8 or int.from_bytes(data[:4], "big") != n:
        raise MessageFormatError("survivors: bitmap does not match the cohort size")
    bits = data[4:]
    if n % 8 and bits[-1] >> (n % 8):
        raise MessageFormatError("survivors: bitmap names parties beyond n")
    flags = np.unpackbits(np.frombuffer(bits, dtype=np.uint8), bitorder="little")
    return frozenset((np.flatnonzero(flags) + 1).tolist())


@dataclass(frozen=True)
class ConsistencyRequest(Message):
    TYPE = MsgType.CONSISTENCY_REQUEST
    survivors: bytes  # encoded bitmap of the parties whose masked input the server holds

    def body(self) -> bytes:
        return _blob(self.survivors)

    @classmethod
    def parse(cls, sid: bytes, party: int, r: _Reader) -> ConsistencyRequest:
        return cls(sid, party, r.blob("survivors"))


@dataclass(frozen=True)
class ConsistencySignature(Message):
    TYPE = MsgType.CONSISTENCY_SIGNATURE
    signature: bytes

    def body(self) -> bytes:
        return self.signature

    @classmethod
    def parse(cls, sid: bytes, party: int, r: _Reader) -> ConsistencySignature:
        return cls(sid, party, r.take(SIG, "signature"))


@dataclass(frozen=True)
class UnmaskRequest(Message):
    TYPE = MsgType.UNMASK_REQUEST
    survivors: bytes
    signatures: tuple[tuple[int, bytes], ...]  # (signer, signature) — active model only

    def body(self) -> bytes:
        sigs = b"".join(_u32(p) + s for p, s in self.signatures)
        return _blob(self.survivors) + _u32(len(self.signatures)) + sigs

    @classmethod
    def parse(cls, sid: bytes, party: int, r: _Reader) -> UnmaskRequest:
        survivors = r.blob("survivors")
        n = r.count(4 + SIG, "signatures")
        return cls(sid, party, survivors, tuple((r.u32("signer"), r.take(SIG, "signature")) for _ in range(n)))


@dataclass(frozen=True)
class UnmaskShares(Message):
    TYPE = MsgType.UNMASK_SHARES
    shares: tuple[tuple[int, int, bytes], ...]  # (owner of the secret, ShareKind, share bytes)

    def body(self) -> bytes:
        return _u32(len(self.shares)) + b"".join(_u32(v) + bytes([k]) + s for v, k, s in self.shares)

    @classmethod
    def parse(cls, sid: bytes, party: int, r: _Reader) -> UnmaskShares:
        n = r.count(_SHARE_ENTRY.size, "shares")
        out = tuple(_SHARE_ENTRY.iter_unpack(r.take(n * _SHARE_ENTRY.size, "shares")))  # fixed-size records
        bad = {kind for _, kind, _ in out} - _SHARE_KINDS
        if bad:
            raise MessageFormatError(f"shares: unknown share kind {min(bad)}")
        return cls(sid, party, out)


def _signature(r: _Reader) -> bytes:
    sig = r.blob("signature")
    if len(sig) not in (0, SIG):
        raise MessageFormatError("signature: must be empty or 64 bytes")
    return sig


_BY_TYPE: dict[int, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        AdvertiseKeys,
        PeerKeys,
        ShareKeys,
        RoutedShares,
        MaskedInput,
        MaskedInputProved,
        ConsistencyRequest,
        ConsistencySignature,
        UnmaskRequest,
        UnmaskShares,
    )
}


def decode(data: bytes) -> Message:
    """Parse any protocol message; raises MessageFormatError on anything malformed."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MessageFormatError("message: expected bytes")
    data = bytes(data)
    if len(data) < HEADER.size:
        raise MessageFormatError("message: shorter than the header")
    magic, version, mtype, sid, party = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise MessageFormatError("message: bad magic")
    if version != VERSION:
        raise MessageFormatError(f"message: unsupported version {version}")
    cls = _BY_TYPE.get(mtype)
    if cls is None:
        raise MessageFormatError(f"message: unknown type {mtype}")
    r = _Reader(data, HEADER.size)
    msg = cls.parse(sid, party, r)
    r.finish()
    return msg


PEER_ENTRY_MAX = 128
"""Bytes one peer may take in a client message: a share-keys entry is 8 + 90 (AES-GCM of two 33-byte
shares and two party ids), an unmask-shares entry 38."""
SHARE_KEYS_FIXED = 4 + SIG + 4
"""Share keys' fixed part: the signature blob and the members wanted."""


def max_client_message_size(dim: int, bits: int, degree: int, proof_bytes: int = 0) -> int:
    """An upper bound on any message a client sends in a session with vector length `dim`, `bits` per entry,
    `degree` neighbours (n − 1 for the complete graph) and validity proofs of `proof_bytes`: lets a server
    refuse a larger body before reading it."""
    vector = (dim * bits + 7) // 8 + (4 + proof_bytes if proof_bytes else 0)
    return HEADER.size + 8 + max(vector, 2 * KEY + 4 + SIG, SHARE_KEYS_FIXED) + PEER_ENTRY_MAX * (degree + 1)
