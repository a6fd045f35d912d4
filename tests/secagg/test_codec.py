"""The wire codec and the integer encodings under hostile or edge-case input.

`secagg.messages.decode`: every message type round-trips; truncations, trailing bytes, bad magic,
version or type, counts beyond the message and malformed fields raise MessageFormatError, and random
bytes (hypothesis) never raise anything else. `secagg.encoding`: bit packing, two's complement in and
out of the ring, no-wrap sizing and unbiased stochastic rounding. Also: the Shamir field modulus is
prime.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secagg import ConfigError, MessageFormatError, encoding, shamir
from secagg.config import MAX_BITS
from secagg.crypto import MEMBER_LEAF_BYTES
from secagg.identity_token import TOKEN_BYTES
from secagg.messages import (
    HEADER,
    MAGIC,
    VERSION,
    AdvertiseKeys,
    ConsistencyRequest,
    ConsistencySignature,
    MaskedInput,
    MAX_MEMBERS_WANTED,
    MaskedInputProved,
    MemberEntry,
    Message,
    MsgType,
    PeerEntry,
    PeerKeys,
    RoutedShares,
    ShareKeys,
    UnmaskRequest,
    UnmaskShares,
    decode,
    decode_bitmap,
    encode_bitmap,
)

SID = bytes(range(16))
KEY_A, KEY_B, KEY_C, KEY_D = (bytes([i]) * 32 for i in (0xA1, 0xB2, 0xC3, 0xD4))
ID_1, ID_2 = bytes([0x11]) * 32, bytes([0x22]) * 32
LEAVES = bytes(range(3 * MEMBER_LEAF_BYTES))
"""A members list of three leaves (the codec does not look inside: the client checks them, test_members.py)."""
SIG = bytes(range(64))
CT = bytes(range(90))
SHARE = bytes(range(33))
MEMBER = MemberEntry(9, KEY_D, KEY_A, KEY_C, SIG)
TOKEN = bytes(i % 251 for i in range(TOKEN_BYTES))
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SAMPLES: list[Message] = [
    AdvertiseKeys(SID, 1, KEY_A, KEY_B),
    AdvertiseKeys(SID, 7, KEY_C, KEY_D),
    PeerKeys(SID, 2, (PeerEntry(1, ID_1, KEY_A, KEY_B), PeerEntry(2, ID_2, KEY_C, KEY_D)), LEAVES),
    PeerKeys(SID, 2, ()),
    ShareKeys(SID, 3, ((1, CT), (2, CT[::-1])), SIG, 0),
    RoutedShares(SID, 4, ((5, CT), (6, b""))),
    MaskedInput(SID, 5, 13, 3, bytes(5)),
    ConsistencyRequest(SID, 6, encode_bitmap({1, 3, 9}, 10)),
    ConsistencySignature(SID, 7, SIG),
    UnmaskRequest(SID, 8, encode_bitmap({2}, 3), ((1, SIG), (2, SIG[::-1]))),
    UnmaskRequest(SID, 8, encode_bitmap({2}, 3), ()),
    UnmaskShares(SID, 9, ((1, 1, SHARE), (2, 2, SHARE[::-1]))),
    MaskedInputProved(SID, 5, 13, 3, bytes(range(5)), bytes(range(40))),
    MaskedInputProved(SID, 5, 16, 2, bytes(4), b""),
    ShareKeys(SID, 3, ((1, CT),)),  # unsigned (a session without identities), no members wanted
    ShareKeys(SID, 3, ((1, CT), (4, CT)), SIG[::-1], MAX_MEMBERS_WANTED),
    RoutedShares(SID, 4, ((5, CT), (6, CT[::-1]))),
    RoutedShares(SID, 4, ((5, CT),), (MEMBER, MemberEntry(12, KEY_B, KEY_C, KEY_D, SIG[::-1]))),
    RoutedShares(SID, 4, (), (MEMBER,)),
    AdvertiseKeys(SID, 2, KEY_A, KEY_B, SIG),  # signed over its bare keys (a session with identities)
    PeerKeys(SID, 2, (PeerEntry(1, ID_1, KEY_A, KEY_B, SIG), PeerEntry(2, ID_2, KEY_C, KEY_D, SIG[::-1])), LEAVES),
    PeerKeys(SID, 2, (PeerEntry(1, ID_1, KEY_A, KEY_B, SIG), PeerEntry(2, ID_2, KEY_C, KEY_D)), LEAVES[:16]),  # mixed
    PeerKeys(SID, 2, (PeerEntry(1, ID_1, KEY_A, KEY_B, SIG, TOKEN), PeerEntry(2, ID_2, KEY_C, KEY_D, SIG[::-1])),
             LEAVES),  # with an issuer token (and one member without)
    RoutedShares(SID, 4, ((5, CT), (6, CT)), (MEMBER,), (TOKEN,)),  # with the member's token
    RoutedShares(SID, 4, (), (MEMBER, MEMBER), (TOKEN, TOKEN[::-1])),
]
ENCODED = [m.encode() for m in SAMPLES]
IDS = [f"{type(m).__name__}-{i}" for i, m in enumerate(SAMPLES)]


def test_samples_cover_every_message_type():
    assert {type(m).TYPE for m in SAMPLES} == set(MsgType)


@pytest.mark.parametrize("msg", SAMPLES, ids=IDS)
def test_every_message_round_trips(msg):
    data = msg.encode()
    assert data[:2] == MAGIC and data[2] == VERSION and data[3] == msg.TYPE
    assert decode(data) == msg
    assert decode(bytearray(data)) == msg and decode(memoryview(data)) == msg


@pytest.mark.parametrize("data", ENCODED, ids=IDS)
def test_every_truncation_is_rejected(data):
    msg = decode(data)
    for cut in range(len(data)):
        if isinstance(msg, MaskedInput) and cut >= HEADER.size + 5:
            # The vector takes the rest of the message; its length is checked against the session's
            # dim and bits (and rejected there, see test_adversarial).
            short = decode(data[:cut])
            with pytest.raises(MessageFormatError, match="vector"):
                encoding.unpack(short.packed, msg.dim, msg.bits)
            continue
        if isinstance(msg, RoutedShares) and msg.member_tokens and \
                cut == len(RoutedShares(msg.session_id, msg.party, msg.ciphertexts, msg.members).encode()):
            # cut exactly before the optional token section: the message as it is without tokens, whose devices
            # then count no peer as credentialed (only the server, who sends it, loses by this)
            assert decode(data[:cut]) == RoutedShares(msg.session_id, msg.party, msg.ciphertexts, msg.members)
            continue
        with pytest.raises(MessageFormatError):
            decode(data[:cut])


@pytest.mark.parametrize("data", [d for d, m in zip(ENCODED, SAMPLES) if not isinstance(m, MaskedInput)])
def test_trailing_bytes_are_rejected(data):
    """(RoutedShares may end in a token section: bytes after its member entries are read as one, and refused.)"""
    for extra in (b"\x00", b"\xff" * 7, data):
        with pytest.raises(MessageFormatError, match="trailing|tokens"):
            decode(data + extra)


def test_a_token_section_must_match_its_entries():
    """RoutedShares' optional section holds one token per member entry (the senders' came with the peer keys)."""
    base = RoutedShares(SID, 4, ((5, CT), (6, CT)), (MEMBER, MEMBER))
    for members, error in [((TOKEN,), "member_tokens: 1 tokens for 2 entries"),
                           ((TOKEN, TOKEN, TOKEN), "member_tokens: 3 tokens for 2 entries"),
                           ((TOKEN[:-1], TOKEN + b"x"), "must be 354 bytes")]:
        bad = RoutedShares(SID, 4, base.ciphertexts, base.members, members).encode()
        with pytest.raises(MessageFormatError, match=error):
            decode(bad)
    assert decode(base.encode()) == base  # no section: no tokens
    # a protocol-2 section (sender tokens, then member tokens) is refused, not read as member tokens
    v2 = base.encode() + struct.pack(">I", 2) + (struct.pack(">I", TOKEN_BYTES) + TOKEN) * 2 + struct.pack(">I", 2) + (
        struct.pack(">I", TOKEN_BYTES) + TOKEN) * 2
    with pytest.raises(MessageFormatError):
        decode(v2)


def test_peer_entry_tokens_are_empty_or_a_whole_token():
    for bad in (TOKEN[:-1], TOKEN + b"x", b"x"):
        entry = PeerEntry(1, ID_1, KEY_A, KEY_B, SIG, bad)
        with pytest.raises(MessageFormatError, match="token"):
            decode(PeerKeys(SID, 1, (entry,), LEAVES).encode())


def test_bad_magic_version_and_type_are_rejected():
    data = ENCODED[0]
    with pytest.raises(MessageFormatError, match="magic"):
        decode(b"SB" + data[2:])
    assert VERSION == 3  # device protocol 3: identities, tokens and the members list in PeerKeys (issue 46)
    for version in (0, 1, 2, 4, 255):  # 2: a protocol-2 device or server is refused, not misparsed
        with pytest.raises(MessageFormatError, match="version"):
            decode(data[:2] + bytes([version]) + data[3:])
    for mtype in (0, 7, 10, 15, 255):
        with pytest.raises(MessageFormatError, match="unknown type"):
            decode(data[:3] + bytes([mtype]) + data[4:])
    for not_bytes in ("SA", None, 42, [1, 2]):
        with pytest.raises(MessageFormatError):
            decode(not_bytes)


def _with_u32(data: bytes, offset: int, value: int) -> bytes:
    return data[:offset] + struct.pack(">I", value) + data[offset + 4 :]


H = HEADER.size


_SK = H + 4 + 64 + 4
"""Where a signed ShareKeys' ciphertext count is: after blob(signature) and members_wanted."""
_RS_MEMBERS = H + 4 + 2 * (8 + 90)
"""Where the member count of a RoutedShares with two 90-byte ciphertexts is (no senders' signatures before it)."""
_PEER = 4 + 3 * 32 + 4
"""A PeerKeys entry's fixed head: party, identity, c_pk, s_pk, the key signature's length (then the signature and the
token blob)."""


def _leaves_at(msg: PeerKeys) -> int:
    """Where a PeerKeys' leaf count is: just before its leaves, at the end."""
    return len(msg.encode()) - 4 - len(msg.leaves)


@pytest.mark.parametrize(
    ("msg", "offset", "field"),
    [
        (SAMPLES[2], H, "peers"),
        (SAMPLES[4], _SK, "ciphertexts"),
        (SAMPLES[4], H, "signature"),  # the signature blob's length prefix
        (SAMPLES[5], H, "ciphertexts"),
        (SAMPLES[11], H, "shares"),
        (SAMPLES[7], H, "survivors"),
        (SAMPLES[4], _SK + 8, "ciphertext"),  # the first ciphertext's length prefix
        (SAMPLES[9], H + 4 + len(SAMPLES[9].survivors), "signatures"),
        (SAMPLES[12], H + 5 + 5, "proof"),
        (SAMPLES[16], _RS_MEMBERS, "members"),
        (SAMPLES[17], H + 4 + 8 + 90, "members"),
        (SAMPLES[18], H + 4, "members"),
        (SAMPLES[19], H + 64, "signature"),  # the key signature's length prefix
        (SAMPLES[20], H, "peers"),
        (SAMPLES[20], _leaves_at(SAMPLES[20]), "leaves"),  # the members list's leaf count
        (SAMPLES[21], _leaves_at(SAMPLES[21]), "leaves"),
        (SAMPLES[22], H + 4 + _PEER + 64, "token"),  # the first entry's token length prefix
        (SAMPLES[22], H + 4 + _PEER + 64 + 4 + TOKEN_BYTES + _PEER + 64, "token"),  # the second entry's (empty)
        (SAMPLES[23], len(SAMPLES[23].encode()) - 4 - TOKEN_BYTES - 4, "member_tokens"),
    ],
)
def test_counts_larger_than_the_message_are_rejected_before_use(msg, offset, field):
    data = msg.encode()
    remaining = len(data) - offset - 4
    for count in (remaining + 1, 0x7FFFFFFF, 0xFFFFFFFF):
        with pytest.raises(MessageFormatError, match=f"{field}: count {count} exceeds"):
            decode(_with_u32(data, offset, count))


def test_malformed_fields_are_rejected():
    for bad in (SIG[:10], SIG + b"x", SIG[:63]):  # a signature is empty or exactly 64 bytes, wherever it is carried
        with pytest.raises(MessageFormatError, match="signature"):
            decode(ShareKeys(SID, 1, ((2, CT),), bad, 0).encode())
        # the key signature of AdvertiseKeys and of every PeerKeys entry (one length for all, or mixed)
        with pytest.raises(MessageFormatError, match="signature"):
            decode(AdvertiseKeys(SID, 1, KEY_A, KEY_B, bad).encode())
        for peers in ((PeerEntry(1, ID_1, KEY_A, KEY_B, bad),),
                      (PeerEntry(1, ID_1, KEY_A, KEY_B, bad), PeerEntry(2, ID_2, KEY_C, KEY_D, bad)),
                      (PeerEntry(1, ID_1, KEY_A, KEY_B, SIG), PeerEntry(2, ID_2, KEY_C, KEY_D, bad)),
                      (PeerEntry(1, ID_1, KEY_A, KEY_B, bad), PeerEntry(2, ID_2, KEY_C, KEY_D, SIG)),
                      (PeerEntry(1, ID_1, KEY_A, KEY_B), PeerEntry(2, ID_2, KEY_C, KEY_D, bad))):
            with pytest.raises(MessageFormatError, match="signature"):
                decode(PeerKeys(SID, 1, peers, LEAVES).encode())
    for length in (65, 0x7FFFFFFF, 0xFFFFFFFF):  # a key signature's length is checked before anything is read
        entry = struct.pack(">I", 1) + ID_1 + KEY_A + KEY_B + struct.pack(">I", length) + SIG + struct.pack(">I", 0)
        with pytest.raises(MessageFormatError, match="signature: must be empty or 64 bytes"):
            decode(HEADER.pack(MAGIC, VERSION, MsgType.PEER_KEYS, SID, 1) + struct.pack(">I", 1) + entry
                   + struct.pack(">I", 0))
    # protocol-2-before-key-signatures layouts (keys without the signature blob) are refused, not misparsed
    with pytest.raises(MessageFormatError):
        decode(AdvertiseKeys(SID, 1, KEY_A, KEY_B).encode()[:-4])
    unsigned_entries = struct.pack(">II", 2, 1) + KEY_A + KEY_B + struct.pack(">I", 2) + KEY_C + KEY_D
    with pytest.raises(MessageFormatError, match="peers"):
        decode(HEADER.pack(MAGIC, VERSION, MsgType.PEER_KEYS, SID, 1) + unsigned_entries)
    # protocol-2 PeerKeys (entries without identity and token, no members list) are refused, not misparsed
    v2_entries = b"".join(struct.pack(">I", v) + c + s + struct.pack(">I", 64) + SIG
                          for v, c, s in ((1, KEY_A, KEY_B), (2, KEY_C, KEY_D)))
    with pytest.raises(MessageFormatError):
        decode(HEADER.pack(MAGIC, VERSION, MsgType.PEER_KEYS, SID, 1) + struct.pack(">I", 2) + v2_entries)
    with pytest.raises(MessageFormatError, match="leaves"):  # a leaf count beyond the bytes, or a partial leaf
        decode(PeerKeys(SID, 1, (), LEAVES).encode()[:-1])
    assert AdvertiseKeys(SID, 1, KEY_A, KEY_B).encode().endswith(KEY_B + struct.pack(">I", 0))
    with pytest.raises(MessageFormatError, match="members_wanted"):
        decode(ShareKeys(SID, 1, ((2, CT),), SIG, MAX_MEMBERS_WANTED + 1).encode())
    with pytest.raises(MessageFormatError, match="members_wanted"):
        decode(ShareKeys(SID, 1, ((2, CT),), SIG, 2**32 - 1).encode())
    # RoutedShares of the unreleased layout that carried the senders' signatures (a count and a blob per ciphertext
    # before the member entries) are refused, not misparsed: the signature count is read as the member count, and the
    # signatures' bytes then fail the lengths of the entries (no members after them) or of the token section
    for senders in range(1, 9):
        cts = tuple((v, CT) for v in range(2, 2 + senders))
        head = RoutedShares(SID, 1, cts).encode()[:-4]
        sigs = struct.pack(">I", senders) + (struct.pack(">I", 64) + SIG) * senders
        with pytest.raises(MessageFormatError, match="members"):
            decode(head + sigs + struct.pack(">I", 0))
        for members, tokens in (((MEMBER,) * 37, ()), ((MEMBER,) * 3, (TOKEN,) * 3), ((MEMBER,), (TOKEN,))):
            rest = RoutedShares(SID, 1, cts, members, tokens).encode()[len(head):]
            with pytest.raises(MessageFormatError):
                decode(head + sigs + rest)
    for kind in (0, 3, 255):
        with pytest.raises(MessageFormatError, match="share kind"):
            decode(UnmaskShares(SID, 1, ((1, kind, SHARE),)).encode())


def test_survivor_bitmaps_round_trip_and_reject_mismatches():
    for n in (1, 7, 8, 9, 64, 1000):
        members = frozenset(range(1, n + 1, 3))
        assert decode_bitmap(encode_bitmap(members, n), n) == members
    bitmap = encode_bitmap({1, 5}, 10)
    with pytest.raises(MessageFormatError, match="cohort size"):
        decode_bitmap(bitmap, 11)
    with pytest.raises(MessageFormatError, match="cohort size"):
        decode_bitmap(bitmap[:-1], 10)
    with pytest.raises(MessageFormatError, match="beyond n"):
        decode_bitmap(bitmap[:-1] + bytes([bitmap[-1] | 0x80]), 10)


def _decodes_canonically_or_rejects(data: bytes) -> None:
    try:
        msg = decode(data)
    except MessageFormatError:
        return
    assert msg.encode() == data  # the codec is canonical: accepted bytes are exactly re-encoded


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_only_raise_message_format_error(data):
    _decodes_canonically_or_rejects(data)


@FUZZ
@given(st.sampled_from(sorted(MsgType)), st.integers(0, 255), st.integers(0, 2**32 - 1), st.binary(max_size=300))
def test_random_bodies_after_a_valid_header_only_raise_message_format_error(mtype, version_noise, party, body):
    version = VERSION if version_noise < 230 else version_noise
    _decodes_canonically_or_rejects(HEADER.pack(MAGIC, version, mtype, SID, party) + body)


@FUZZ
@given(
    st.sampled_from(ENCODED),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=6),
    st.integers(0, 10**6),
    st.binary(max_size=8),
)
def test_mutated_valid_messages_only_raise_message_format_error(data, edits, cut, tail):
    out = bytearray(data)
    for pos, value in edits:
        out[pos % len(out)] = value
    out = bytes(out[: max(0, len(out) - cut % 40)]) + tail
    _decodes_canonically_or_rejects(out)


def _entry_by_entry(data: bytes) -> Message:
    """Reference parse of the entry-list messages (PeerKeys, ShareKeys, RoutedShares), one field at a time, as
    the codec did before its one-`iter_unpack` fast path for entries of one length (ShareKeys, RoutedShares; PeerKeys
    entries carry two variable-length blobs and are always read one field at a time)."""
    _, _, mtype, sid, party = HEADER.unpack_from(data)
    pos = HEADER.size

    def take(k: int) -> bytes:
        nonlocal pos
        if pos + k > len(data):
            raise MessageFormatError("truncated")
        pos += k
        return data[pos - k : pos]

    def u32() -> int:
        return struct.unpack(">I", take(4))[0]

    def count(entry: int) -> int:
        n = u32()
        if n * entry > len(data) - pos:
            raise MessageFormatError("count")
        return n

    def signature() -> bytes:
        sig = take(count(1))
        if len(sig) not in (0, 64):
            raise MessageFormatError("signature")
        return sig

    def pairs() -> tuple[tuple[int, bytes], ...]:
        return tuple((u32(), take(count(1))) for _ in range(count(8)))

    def token() -> bytes:
        tok = take(count(1))
        if len(tok) not in (0, TOKEN_BYTES):
            raise MessageFormatError("token")
        return tok

    if mtype == MsgType.PEER_KEYS:
        peers = tuple(PeerEntry(u32(), take(32), take(32), take(32), signature(), token()) for _ in range(count(108)))
        out: Message = PeerKeys(sid, party, peers, take(16 * count(16)))
    elif mtype == MsgType.SHARE_KEYS:
        sig, wanted = signature(), u32()
        if wanted > MAX_MEMBERS_WANTED:
            raise MessageFormatError("members_wanted")
        out = ShareKeys(sid, party, pairs(), sig, wanted)
    else:
        cts = pairs()
        members = tuple(MemberEntry(u32(), take(32), take(32), take(32), take(64)) for _ in range(count(164)))
        if pos == len(data):
            out = RoutedShares(sid, party, cts, members)
        else:
            held = tuple(take(count(1)) for _ in range(count(4 + TOKEN_BYTES)))
            if len(held) != len(members) or any(len(t) != TOKEN_BYTES for t in held):
                raise MessageFormatError("tokens")
            out = RoutedShares(sid, party, cts, members, held)
    if pos != len(data):
        raise MessageFormatError("trailing")
    return out


_LENGTHS = st.sampled_from([0, 1, 64, 90, 90, 90])


@FUZZ
@given(
    st.sampled_from([MsgType.PEER_KEYS, MsgType.SHARE_KEYS, MsgType.ROUTED_SHARES]),
    st.lists(st.tuples(st.integers(0, 2**32 - 1), _LENGTHS), max_size=8),
    st.booleans(),
    st.lists(st.tuples(st.integers(0, 10**4), st.integers(0, 255)), max_size=3),
    st.integers(0, 12),
    st.binary(max_size=6),
    st.booleans(),
    st.integers(0, 3),
)
def test_entry_lists_decode_as_the_entry_by_entry_reference(mtype, entries, uniform, edits, cut, tail, signed, members):
    """Entry lists of one length (every honest message) take the fast path, mixed or malformed ones the
    entry-by-entry path; either way decode() returns what the reference parse returns, or both refuse."""
    if uniform and entries:
        entries = [(v, entries[0][1]) for v, _ in entries]
    if mtype == MsgType.PEER_KEYS:  # key signatures of 0, 1, 64 or 90 bytes; tokens of 0 or 354 (after an odd party)
        msg: Message = PeerKeys(SID, 3, tuple(PeerEntry(v, ID_1, KEY_A, bytes([k]) * 32, bytes([k % 251]) * k,
                                                        TOKEN if v % 2 else b"") for v, k in entries),
                                LEAVES[: 16 * members])
    elif mtype == MsgType.SHARE_KEYS:
        msg = ShareKeys(SID, 3, tuple((v, bytes([k % 251]) * k) for v, k in entries), SIG if signed else b"", members)
    else:
        cts = tuple((v, bytes([k % 251]) * k) for v, k in entries)
        msg = RoutedShares(SID, 3, cts, tuple(MemberEntry(i, KEY_A, KEY_B, KEY_C, SIG) for i in range(members)))
    out = bytearray(msg.encode())
    for pos, value in edits:
        out[HEADER.size + pos % max(1, len(out) - HEADER.size)] = value
    data = bytes(out[: len(out) - cut if cut < len(out) - HEADER.size else len(out)]) + tail
    try:
        want = _entry_by_entry(data)
    except MessageFormatError:
        with pytest.raises(MessageFormatError):
            decode(data)
        return
    assert decode(data) == want
    if not edits and not tail and (cut == 0 or cut >= len(out) - HEADER.size):
        assert want == msg


def test_peer_keys_from_pre_encoded_entries_equal_the_message_encoding():
    """The server's fast path (`encode_peer_keys`: each entry and the leaves encoded once per cohort) writes exactly
    what `PeerKeys.encode()` writes."""
    from secagg.messages import encode_peer_keys

    for peers in ((PeerEntry(1, ID_1, KEY_A, KEY_B), PeerEntry(4, ID_2, KEY_C, KEY_D)),
                  (PeerEntry(1, ID_1, KEY_A, KEY_B, SIG), PeerEntry(4, ID_2, KEY_C, KEY_D, SIG[::-1], TOKEN))):
        for leaves in (LEAVES, b""):
            fast = encode_peer_keys(SID, 9, [p.encode() for p in peers], leaves)
            assert fast == PeerKeys(SID, 9, peers, leaves).encode() and decode(fast) == PeerKeys(SID, 9, peers, leaves)
    assert encode_peer_keys(SID, 9, [], LEAVES) == PeerKeys(SID, 9, (), LEAVES).encode()


def test_routed_shares_from_pre_encoded_parts_equal_the_message_encoding():
    """The server's fast path (`encode_routed`) writes exactly what `RoutedShares.encode()` writes."""
    from secagg.messages import encode_blob, encode_pair, encode_routed

    cts = ((1, CT), (4, CT[::-1]))
    members = (MEMBER, MemberEntry(30, KEY_C, KEY_B, KEY_A, SIG))
    for c, m in ((cts, members), (cts, ()), ((), members), ((), ())):
        fast = encode_routed(SID, 9, [encode_pair(v, ct) for v, ct in c], [e.encode() for e in m])
        assert fast == RoutedShares(SID, 9, c, m).encode()
        assert decode(fast) == RoutedShares(SID, 9, c, m)
        if m:  # with the members' tokens
            tokens = tuple(TOKEN[i:] + TOKEN[:i] for i in range(len(m)))
            fast = encode_routed(SID, 9, [encode_pair(v, ct) for v, ct in c], [e.encode() for e in m],
                                 [encode_blob(t) for t in tokens])
            assert fast == RoutedShares(SID, 9, c, m, tokens).encode()
            assert decode(fast) == RoutedShares(SID, 9, c, m, tokens)


# ---------------------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------------------


def _reference_pack(values: np.ndarray, bits: int) -> bytes:
    """Entry i occupies bits [i·bits, (i+1)·bits) of a little-endian bit string."""
    acc = 0
    for i, v in enumerate(values.tolist()):
        acc |= int(v) << (i * bits)
    return acc.to_bytes(encoding.packed_size(len(values), bits), "little")


@settings(max_examples=250, deadline=None)
@given(st.integers(1, MAX_BITS), st.integers(0, 40), st.integers(0, 2**32 - 1))
def test_pack_unpack_round_trip_with_exact_bit_layout(bits, dim, seed):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1 << bits, dim, dtype=np.uint64)
    values[: min(dim, 2)] = [(1 << bits) - 1, 0][: min(dim, 2)]  # extremes
    packed = encoding.pack(values, bits)
    assert len(packed) == encoding.packed_size(dim, bits)
    assert packed == _reference_pack(values, bits)
    assert np.array_equal(encoding.unpack(packed, dim, bits), values)
    if bits <= 32:
        narrow = encoding.unpack(packed, dim, bits, np.dtype(np.uint32))
        assert narrow.dtype == np.uint32 and np.array_equal(narrow, values)
        assert encoding.pack(values.astype(np.uint32), bits) == packed


def test_unpack_rejects_wrong_lengths():
    packed = encoding.pack(np.arange(5, dtype=np.uint64), 13)
    for bad in (packed[:-1], packed + b"\x00", b""):
        with pytest.raises(MessageFormatError, match="vector"):
            encoding.unpack(bad, 5, 13)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, MAX_BITS), st.data())
def test_to_modular_from_modular_round_trip(bits, data):
    half = 1 << (bits - 1)
    values = np.array(data.draw(st.lists(st.integers(-half, half - 1), max_size=20)) + [-half, half - 1], np.int64)
    ring = encoding.to_modular(values, bits)
    assert ring.dtype == np.uint64
    assert all(int(r) == int(v) % (1 << bits) for r, v in zip(ring, values))
    assert np.array_equal(encoding.from_modular(ring, bits), values)


def test_to_modular_refuses_out_of_range_and_non_integer_values():
    for values in ([128], [-129], [1000]):
        with pytest.raises(ConfigError, match="values"):
            encoding.to_modular(np.array(values), 8)
    with pytest.raises(ConfigError, match="integers"):
        encoding.to_modular(np.array([0.5]), 8)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10**6), st.integers(0, 2**45), st.booleans())
def test_bits_for_is_the_smallest_width_that_cannot_wrap(n, max_abs, signed):
    try:
        bits = encoding.bits_for(n, max_abs, signed)
    except ConfigError:
        assert encoding.bits_needed(n, max_abs, signed) > MAX_BITS
        with pytest.raises(ConfigError):
            encoding.check_no_wrap(n, max_abs, MAX_BITS, signed)
        return
    encoding.check_no_wrap(n, max_abs, bits, signed)
    # The extreme sums survive the trip through the ring …
    extremes = [n * max_abs, -n * max_abs] if signed else [n * max_abs]
    ring = [x % (1 << bits) for x in extremes]
    if signed:
        assert encoding.from_modular(np.array(ring, np.uint64), bits).tolist() == extremes
    else:
        assert ring == extremes
    # … and one bit fewer is refused (when that width exists and the sum is not trivially zero).
    if bits > 1:
        with pytest.raises(ConfigError, match="bits"):
            encoding.check_no_wrap(n, max_abs, bits - 1, signed)


def test_check_no_wrap_refuses_wrapping_configurations():
    encoding.check_no_wrap(1000, 2**20, 31)  # 1000·2^20 < 2^30
    with pytest.raises(ConfigError, match="need 33 bits"):
        encoding.check_no_wrap(2048, 2**20, 31)  # ±2^31 needs 33 signed bits (2^31 - 1 is the 32-bit max)
    with pytest.raises(ConfigError, match="bits"):
        encoding.check_no_wrap(2, 128, 8, signed=False)  # 256 wraps to 0 modulo 2^8
    encoding.check_no_wrap(2, 127, 8, signed=False)
    for bits in (0, MAX_BITS + 1):
        with pytest.raises(ConfigError, match="bits"):
            encoding.check_no_wrap(1, 1, bits)
    with pytest.raises(ConfigError, match="more than 62"):
        encoding.bits_for(2**20, 2**45)


def test_fixed_point_stochastic_rounding_is_unbiased():
    # Each encoded entry is floor(x·s) + Bernoulli(frac(x·s)), so the sample mean of N entries has standard
    # deviation sqrt(f(1-f)/N) ≤ 0.5/sqrt(N) ≈ 0.00112 for N = 200,000. A tolerance of 0.006 is more than
    # 5 such deviations (false-failure probability < 1e-7; the seed is fixed anyway), while nearest or
    # floor rounding of these values is off by at least 0.2 units.
    n, tol = 200_000, 0.006
    fp = encoding.FixedPoint(clip=2.0, scale=10.0)
    rng = np.random.default_rng(20240601)
    for x in (0.03, -0.03, 0.123, -1.777, 1.98):
        encoded = fp.encode(np.full(n, x), rng)
        assert encoded.dtype == np.int64
        assert set(np.unique(encoded).tolist()) <= {int(np.floor(x * 10)), int(np.floor(x * 10)) + 1}
        assert abs(encoded.mean() - x * 10) < tol, x
        assert abs(fp.decode(encoded).mean() - x) < tol / 10


def test_fixed_point_clips_and_refuses_bad_values():
    fp = encoding.FixedPoint(clip=1.5, scale=4.0)
    assert fp.max_abs == 6
    assert fp.encode(np.array([10.0, -10.0, 1.5, -1.5]), np.random.default_rng(0)).tolist() == [6, -6, 6, -6]
    with pytest.raises(ConfigError, match="finite"):
        fp.encode(np.array([np.nan]))
    for clip, scale in ((0, 1), (1, -1), (np.inf, 1), (1, np.nan)):
        with pytest.raises(ConfigError):
            encoding.FixedPoint(clip, scale)


# ---------------------------------------------------------------------------------------------------
# the Shamir field
# ---------------------------------------------------------------------------------------------------

# The first 40 primes. Miller–Rabin with these fixed bases is deterministic below 3.3·10^24 (bases up to 41
# suffice there); for a 257-bit number no composite is known to pass all of them, and each base alone lets
# a composite through with probability ≤ 1/4, so a false "prime" would need all 40 to fail (≤ 2^-80).
# A "composite" verdict is a certificate and is never wrong.
BASES = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 101,
         103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157, 163, 167, 173]  # fmt: skip


def miller_rabin(n: int) -> bool:
    if n < 2:
        return False
    for p in BASES:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in BASES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def test_miller_rabin_itself():
    assert [k for k in range(200) if miller_rabin(k)] == [k for k in range(200) if all(k % d for d in range(2, k))
                                                          and k > 1]  # fmt: skip
    assert miller_rabin(2**61 - 1) and miller_rabin(2**127 - 1)
    # Carmichael numbers and a strong pseudoprime to bases 2, 3, 5, 7, 11 (but not 13).
    for composite in (561, 41041, 825265, 2152302898747, 2**67 - 1, (2**61 - 1) * (2**31 - 1)):
        assert not miller_rabin(composite)


def test_shamir_prime_is_the_smallest_prime_above_2_256():
    assert shamir.PRIME > 2**256
    assert miller_rabin(shamir.PRIME)
    assert not any(miller_rabin(k) for k in range(2**256 + 1, shamir.PRIME))


def test_shamir_shares_fit_the_wire_format():
    assert (shamir.PRIME - 1).bit_length() <= 8 * shamir.SHARE_BYTES
    shares = shamir.split(2**256 - 1, [1, 2, 3, 4, 5], 3)
    assert shamir.BatchReconstructor(3).reconstruct({x: shares[x] for x in (2, 4, 5)}, "s", "test") == 2**256 - 1
    for s in shares.values():
        assert shamir.from_bytes(shamir.to_bytes(s)) == s


def test_message_dataclasses_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SAMPLES[0].party = 2  # type: ignore[misc]
