"""The frozen known-answer vectors in tests/vectors/ (format: docs/vectors.md).

Each file must be byte-identical to what `tests/support/vectors.py` computes from the code now, and each
case's output must follow from its recorded input alone — the way a port in another language uses them.
A failure here means the protocol changed: fix the code, or bump the version and regenerate.
"""

from __future__ import annotations

import hashlib

import json
import struct
import sys
from pathlib import Path

import nacl.exceptions
import numpy as np
import nacl.signing
import pytest

from tests.support import vectors as make_vectors

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "tests" / "vectors"
TOPICS = sorted(make_vectors.TOPICS)


def test_every_topic_has_a_file_and_every_file_a_topic():
    assert sorted(p.stem for p in VECTORS.glob("*.json")) == TOPICS
    assert {"randomness", "noise", "key_agreement", "prg", "neighbour_graph", "share_encryption", "shamir", "messages",
            "transcript", "request_signing", "validity", "task_digest", "signed_payloads", "members",
            "safety_floor"} <= set(TOPICS)


@pytest.mark.parametrize("name", TOPICS)
def test_file_is_byte_identical_to_the_recomputed_vectors(name):
    assert (VECTORS / f"{name}.json").read_bytes() == make_vectors.render(name).encode("utf-8")


@pytest.mark.parametrize("name", TOPICS)
def test_each_output_follows_from_its_recorded_input(name):
    doc = json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))
    assert doc["topic"] == name and doc["versions"] == make_vectors.versions() and doc["cases"]
    compute = make_vectors.TOPICS[name].compute
    for case in doc["cases"]:
        assert json.loads(json.dumps(compute(case["input"]))) == case["output"]


def test_the_generator_is_deterministic():
    assert all(make_vectors.render(n) == make_vectors.render(n) for n in TOPICS)


# -- device protocol 3, checked from the files alone (no code of this repository): what a port relies on ------------

DOMAIN = b"fa-secagg/v3/"
LEAF = 16


def _cases(name: str) -> list[dict]:
    return json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))["cases"]


def test_the_secagg_vectors_are_pinned_to_protocol_3():
    for name in TOPICS:
        versions = json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))["versions"]
        assert versions["secagg_wire"] == 3 and versions["secagg_hkdf_domain"] == DOMAIN.decode()


def _hkdf(key: bytes, info: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(key)


def _member_leaf(party: int, identity: bytes, c_pk: bytes, s_pk: bytes) -> bytes:
    return hashlib.sha256(DOMAIN + b"member/" + struct.pack(">I", party) + identity + c_pk + s_pk).digest()[:LEAF]


def _members_root(leaves: bytes) -> bytes:
    return hashlib.sha256(DOMAIN + b"members/" + struct.pack(">I", len(leaves) // LEAF) + leaves).digest()


def _ring(seed: bytes, n: int) -> list[int]:
    """The Harary ring as docs/vectors.md describes it: AES-256-CTR (zero counter block) keyed HKDF(seed, DOMAIN ‖
    'prg-uint64'), n little-endian u64 words, Fisher–Yates from the top."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    key = _hkdf(seed, DOMAIN + b"prg-uint64")
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(8 * n))
    words = struct.unpack(f"<{n}Q", stream)
    order = list(range(1, n + 1))
    for i in range(n - 1, 0, -1):
        j = words[i] % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def _closed(order: list[int], degree: int, party: int) -> list[int]:
    n = len(order)
    if degree >= n - 1:
        return list(range(1, n + 1))
    slot = order.index(party)
    return sorted(order[(slot + d) % n] for d in range(-(degree // 2), degree // 2 + 1))


def test_members_vectors_follow_from_their_entries():
    """Leaves, root, graph seed, neighbourhoods and round binding, recomputed with hashlib, HKDF and AES-CTR alone."""
    for case in _cases("members"):
        i, o = case["input"], case["output"]
        n = i["n"]
        leaves = [bytes(LEAF)] * n
        for e in i["entries"]:
            leaves[e["party"] - 1] = _member_leaf(e["party"], *(bytes.fromhex(e[k]) for k in ("identity", "c_pk", "s_pk")))
        assert o["leaves"] == [leaf.hex() for leaf in leaves]
        for q, pre in o["leaf_inputs"].items():
            assert hashlib.sha256(bytes.fromhex(pre)).digest()[:LEAF] == leaves[int(q) - 1]
        root = _members_root(b"".join(leaves))
        bind = bytes.fromhex(i["session_id"]) + bytes.fromhex(i["task_digest"])
        seed = _hkdf(root, DOMAIN + b"graph/" + bind)
        assert (o["members_root"], o["binding"], o["graph_seed"], o["round_binding"]) == (
            root.hex(), bind.hex(), seed.hex(), (bind + root).hex())
        order = _ring(seed, n)
        assert o["closed_neighbourhoods"] == {str(q): _closed(order, i["degree"], q) for q in i["parties"]}
    by_name = {c["input"]["name"]: c["output"] for c in _cases("members")}
    # one entry changed: another root, another graph
    assert by_name["twelve"]["members_root"] != by_name["twelve:altered"]["members_root"]
    assert by_name["twelve"]["closed_neighbourhoods"] != by_name["twelve:altered"]["closed_neighbourhoods"]
    assert all(leaf == "00" * LEAF for leaf in by_name["none"]["leaves"])


def test_neighbour_graph_vectors_follow_from_the_members_root():
    for case in _cases("neighbour_graph"):
        i, o = case["input"], case["output"]
        bind = bytes.fromhex(i["session_id"]) + bytes.fromhex(i["task_digest"])
        seed = _hkdf(bytes.fromhex(i["members_root"]), DOMAIN + b"graph/" + bind)
        assert o["binding"] == bind.hex() and o["graph_seed"] == seed.hex()
        order = _ring(seed, i["n"])
        assert o["ring_order"] == order
        assert o["closed_neighbourhoods"] == {str(q): _closed(order, i["degree"], q) for q in i["parties"]}


def _round_binding(i: dict) -> bytes:
    return bytes.fromhex(i["session_id"]) + bytes.fromhex(i["task_digest"]) + bytes.fromhex(i["members_root"])


def test_signed_payload_vectors_verify_with_libsodium_and_only_under_their_binding():
    for case in _cases("signed_payloads"):
        i, o = case["input"], case["output"]
        key = nacl.signing.SigningKey(bytes.fromhex(i["identity_private"]))
        public = key.verify_key
        assert bytes(public).hex() == o["public_key"]
        bind = _round_binding(i)
        assert o["binding"] == bind[:48].hex() and o["round_binding"] == bind.hex() and len(bind) == 80
        advertise = (DOMAIN + b"advertise/" + bind + struct.pack(">I", i["party"]) + bytes.fromhex(i["c_pk"])
                     + bytes.fromhex(i["s_pk"]))
        n, members = i["survivors"]["n"], i["survivors"]["members"]
        bitmap = bytearray((n + 7) // 8)
        for p in members:
            bitmap[(p - 1) // 8] |= 1 << ((p - 1) % 8)
        bitmap = struct.pack(">I", n) + bytes(bitmap)
        consistency = DOMAIN + b"consistency/" + bind + bitmap
        assert (o["advertise_payload"], o["survivors_bitmap"], o["consistency_payload"]) == (
            advertise.hex(), bitmap.hex(), consistency.hex())
        for payload, sig in ((advertise, o["advertise_signature"]), (consistency, o["consistency_signature"])):
            assert key.sign(payload).signature.hex() == sig  # deterministic (RFC 8032)
            public.verify(payload, bytes.fromhex(sig))
            for lo, hi in ((16, 48), (48, 80)):  # another task, or another members list: refused
                other = payload.replace(bind, bind[:lo] + bytes(a ^ 1 for a in bind[lo:hi]) + bind[hi:], 1)
                with pytest.raises(nacl.exceptions.BadSignatureError):
                    public.verify(other, bytes.fromhex(sig))
        # the session-free signature over the bare keys (AdvertiseKeys, PeerKeys entries)
        keys = DOMAIN + b"keys/" + bytes.fromhex(i["c_pk"]) + bytes.fromhex(i["s_pk"])
        assert o["keys_payload"] == keys.hex() and bind[:48].hex() not in o["keys_payload"]
        assert key.sign(keys).signature.hex() == o["keys_signature"]
        public.verify(keys, bytes.fromhex(o["keys_signature"]))
        for other in (DOMAIN + b"keys/" + bytes.fromhex(i["s_pk"]) + bytes.fromhex(i["c_pk"]), advertise):
            with pytest.raises(nacl.exceptions.BadSignatureError):
                public.verify(other, bytes.fromhex(o["keys_signature"]))  # swapped keys, or the bound payload


def test_key_agreement_and_share_vectors_bind_the_task_digest_and_the_members_root():
    for case in _cases("key_agreement"):
        i, o = case["input"], case["output"]
        bind = i["session_id"] + i["task_digest"]
        rbind = bind + i["members_root"]
        assert o["binding"] == bind and o["round_binding"] == rbind
        assert o["graph_seed_info"] == (DOMAIN + b"graph/").hex() + bind
        assert o["graph_seed"] == _hkdf(bytes.fromhex(i["members_root"]), bytes.fromhex(o["graph_seed_info"])).hex()
        lo, hi = sorted((i["a_party"], i["b_party"]))
        pair = rbind + struct.pack(">II", lo, hi).hex()
        assert o["channel_info"] == (DOMAIN + b"channel/").hex() + pair
        assert o["pairmask_info"] == (DOMAIN + b"pairmask/").hex() + pair
        assert o["selfmask_info"] == (DOMAIN + b"selfmask/").hex() + rbind + struct.pack(">I", i["a_party"]).hex()
        shared = bytes.fromhex(o["shared_secret"])
        assert o["channel_key"] == _hkdf(shared, bytes.fromhex(o["channel_info"])).hex()
        assert o["pairmask_key"] == _hkdf(shared, bytes.fromhex(o["pairmask_info"])).hex()
        assert o["selfmask_key"] == _hkdf(bytes.fromhex(i["self_mask_seed"]), bytes.fromhex(o["selfmask_info"])).hex()
    for case in _cases("share_encryption"):
        i, o = case["input"], case["output"]
        assert o["associated_data"] == ((DOMAIN + b"share/").hex() + i["session_id"] + i["task_digest"]
                                        + i["members_root"] + struct.pack(">II", i["sender"], i["receiver"]).hex())
    outputs = [c["output"] for c in _cases("key_agreement")]
    assert len({o["round_binding"] for o in outputs}) == len(outputs)  # the digest, or the root, changes every key
    assert len({o["channel_key"] for o in outputs}) == len(outputs)


def _blob(hex_bytes: str) -> str:
    return struct.pack(">I", len(hex_bytes) // 2).hex() + hex_bytes


def _peer_keys_body(body: bytes) -> tuple[list[dict], bytes]:
    """A PeerKeys body parsed by hand: entries (party ‖ identity ‖ c_pk ‖ s_pk ‖ blob(signature) ‖ blob(token)), then
    the members list (u32 count ‖ 16-byte leaves)."""
    (count,) = struct.unpack(">I", body[:4])
    pos, entries = 4, []
    for _ in range(count):
        (party,) = struct.unpack(">I", body[pos : pos + 4])
        identity, c_pk, s_pk = body[pos + 4 : pos + 36], body[pos + 36 : pos + 68], body[pos + 68 : pos + 100]
        (length,) = struct.unpack(">I", body[pos + 100 : pos + 104])
        signature = body[pos + 104 : pos + 104 + length]
        pos += 104 + length
        (length,) = struct.unpack(">I", body[pos : pos + 4])
        token = body[pos + 4 : pos + 4 + length]
        pos += 4 + length
        entries.append({"party": party, "identity": identity, "c_pk": c_pk, "s_pk": s_pk, "signature": signature,
                        "token": token})
    (leaves,) = struct.unpack(">I", body[pos : pos + 4])
    assert len(body) == pos + 4 + LEAF * leaves
    return entries, body[pos + 4 :]


def test_transcripts_sign_and_relay_every_party_s_keys_with_the_members_list():
    """Each AdvertiseKeys carries the sender's signature over its bare keys; every PeerKeys entry relays the sender's
    identity, keys and that signature, and every PeerKeys carries the same members list: one leaf per party over its
    identity and keys (zeros for a party that never advertised), whose root the transcript records and whose graph
    gives exactly the entries each party is shown. Each ShareKeys carries the sender's signature over its keys bound to
    session ‖ task digest ‖ members root, and each RoutedShares its neighbours' ciphertexts and nothing else (no
    sender's signature: a share that opens under its channel key is its sender's word) — parsed by hand."""
    models, names = set(), set()
    for case in _cases("transcript"):
        i, o = case["input"], case["output"]
        models.add(i["threat_model"])
        names.add(i["name"])
        n = i["n"]
        assert i["task_digest"] != "00" * 32
        bind = bytes.fromhex(i["session_id"]) + bytes.fromhex(i["task_digest"])
        ids = {int(p): bytes.fromhex(s["identity_public"]) for p, s in o["party_secrets"].items()}
        keys, key_sigs, sigs, lists = {}, {}, {}, []
        kinds = set()
        for m in o["messages"]:
            data = bytes.fromhex(m["bytes"])
            assert data[:3] == b"SA\x03"
            body, party = data[24:], m["party"]
            if m["type"] == "AdvertiseKeys":
                keys[party] = body[:64]
                assert len(body) == 64 + 4 + 64 and struct.unpack(">I", body[64:68]) == (64,)
                key_sigs[party] = body[68:]
                nacl.signing.VerifyKey(ids[party]).verify(DOMAIN + b"keys/" + keys[party], key_sigs[party])
            elif m["type"] == "PeerKeys":
                entries, leaves = _peer_keys_body(body)
                lists.append(leaves)
                for e in entries:
                    assert (e["identity"], e["c_pk"] + e["s_pk"], e["signature"], e["token"]) == (
                        ids[e["party"]], keys[e["party"]], key_sigs[e["party"]], b"")
                expected = [_member_leaf(q, ids[q], keys[q][:32], keys[q][32:]) if q in keys else bytes(LEAF)
                            for q in range(1, n + 1)]
                assert leaves == b"".join(expected)
                root = _members_root(leaves)
                assert root.hex() == o["members_root"]
                order = _ring(_hkdf(root, DOMAIN + b"graph/" + bind), n)
                degree = i["degree"] if i["degree"] is not None else n - 1
                assert _closed(order, degree, party) == o["closed_neighbourhoods"][str(party)]
                assert [e["party"] for e in entries] == [q for q in _closed(order, degree, party) if q in keys]
            elif m["type"] == "ShareKeys":
                (length,) = struct.unpack(">I", body[:4])
                assert length == 64
                sigs[party] = body[4:68]
                root = bytes.fromhex(o["members_root"])
                payload = DOMAIN + b"advertise/" + bind + root + struct.pack(">I", party) + keys[party]
                nacl.signing.VerifyKey(ids[party]).verify(payload, sigs[party])
                assert struct.unpack(">I", body[68:72]) == (0,)  # members_wanted: none asked
            elif m["type"] == "RoutedShares":
                (count,) = struct.unpack(">I", body[:4])
                pos, senders = 4, []
                for _ in range(count):
                    sender, length = struct.unpack(">II", body[pos : pos + 8])
                    senders.append(sender)
                    pos += 8 + length
                assert set(senders) == set(o["closed_neighbourhoods"][str(party)]) - {party} - set(
                    i["drop_before_advertise_keys"])
                assert body[pos:] == struct.pack(">I", 0)  # no signatures, no member entries, no token section
            kinds.add(m["type"])
        assert len(set(lists)) == 1  # every party was shown the same members list
        assert {"AdvertiseKeys", "PeerKeys", "ShareKeys", "RoutedShares"} <= kinds
        if i["drop_before_advertise_keys"]:
            assert all(lists[0][(q - 1) * LEAF : q * LEAF] == bytes(LEAF) for q in i["drop_before_advertise_keys"])
    assert models == {"semi_honest", "active"} and {"semi_honest_absent", "sparse"} <= names


def test_message_vectors_cover_the_protocol_3_layouts():
    cases = [c["input"] for c in _cases("messages")]
    adverts = [c["fields"] for c in cases if c["type"] == "AdvertiseKeys"]
    assert all(set(f) <= {"c_pk", "s_pk", "signature"} for f in adverts)
    assert any(not f.get("signature") for f in adverts) and any(len(f.get("signature", "")) == 128 for f in adverts)
    entries = [e for c in cases if c["type"] == "PeerKeys" for e in c["fields"]["peers"]]
    assert all({"party", "identity", "c_pk", "s_pk"} <= set(e) <= {"party", "identity", "c_pk", "s_pk", "signature",
                                                                    "token"} for e in entries)
    assert any(not e.get("signature") for e in entries) and any(len(e.get("signature", "")) == 128 for e in entries)
    assert any(e["identity"] == "00" * 32 for e in entries) and any(len(e.get("token", "")) == 708 for e in entries)
    assert any(not e.get("token") for e in entries)
    assert any("00" * LEAF in c["fields"]["leaves"] for c in cases if c["type"] == "PeerKeys")  # an absent member
    for case in _cases("messages"):  # the layouts, from the bytes
        i, body = case["input"], case["output"]["bytes"][48:]
        f = i["fields"]
        if i["type"] == "AdvertiseKeys":
            assert body == f["c_pk"] + f["s_pk"] + _blob(f.get("signature", ""))
        elif i["type"] == "PeerKeys":
            assert body == struct.pack(">I", len(f["peers"])).hex() + "".join(
                struct.pack(">I", e["party"]).hex() + e["identity"] + e["c_pk"] + e["s_pk"]
                + _blob(e.get("signature", "")) + _blob(e.get("token", "")) for e in f["peers"]
            ) + struct.pack(">I", len(f["leaves"])).hex() + "".join(f["leaves"])
        elif i["type"] == "RoutedShares":  # no senders' signatures; the optional section: member tokens only
            tokens = f.get("member_tokens", [])
            assert not tokens or len(tokens) == len(f["members"])
            assert body == struct.pack(">I", len(f["ciphertexts"])).hex() + "".join(
                struct.pack(">II", v, len(ct) // 2).hex() + ct for v, ct in f["ciphertexts"]
            ) + struct.pack(">I", len(f["members"])).hex() + "".join(
                struct.pack(">I", e["party"]).hex() + e["identity"] + e["c_pk"] + e["s_pk"] + e["signature"]
                for e in f["members"]
            ) + ((struct.pack(">I", len(tokens)).hex() + "".join(_blob(t) for t in tokens)) if tokens else "")
    share_keys = [c["fields"] for c in cases if c["type"] == "ShareKeys"]
    assert any(f["signature"] == "" for f in share_keys) and any(len(f["signature"]) == 128 for f in share_keys)
    assert any(f["members_wanted"] > 0 for f in share_keys)
    routed = [c["fields"] for c in cases if c["type"] == "RoutedShares"]
    assert not any("signatures" in f for f in routed)  # the senders' signatures left the message (still protocol 3)
    assert any(f["ciphertexts"] and f["members"] for f in routed) and any(f["members"] and not f["ciphertexts"]
                                                                         for f in routed)
    assert any(f["ciphertexts"] and not f["members"] for f in routed) and any(f.get("member_tokens") for f in routed)
    assert not any("sender_tokens" in f for f in routed)  # protocol 3: the senders' tokens ride in PeerKeys


def test_key_signatures_and_tokens_of_a_wrong_length_in_the_message_vectors_are_refused():
    """The signed AdvertiseKeys / PeerKeys vectors decode; with one key signature cut to 63 bytes or grown to 65, or
    one PeerKeys token cut by a byte (their length prefixes adjusted, so the message is otherwise well formed), the
    codec refuses with MessageFormatError."""
    from secagg.errors import MessageFormatError
    from secagg.messages import decode

    checked = 0
    for case in _cases("messages"):
        i, data = case["input"], bytes.fromhex(case["output"]["bytes"])
        fields = [("signature", i["fields"].get("signature", ""))] if i["type"] == "AdvertiseKeys" else [
            (k, e.get(k, "")) for e in i["fields"].get("peers", []) for k in ("signature", "token")]
        for what, value in fields:
            if not value:
                continue
            blob = _blob(value)
            assert data.hex().count(blob) == 1
            decode(data)
            for wrong in (value[:-2], value + "00"):
                bad = data.hex().replace(blob, _blob(wrong))
                with pytest.raises(MessageFormatError, match=what):
                    decode(bytes.fromhex(bad))
            checked += 1
    assert checked >= 5  # one signed AdvertiseKeys, signed PeerKeys entries, entries with tokens


# -- the safety floor, from its description alone -----------------------------------------------------------------


def _floor_from_the_description(i: dict) -> dict:
    """The `safety_floor` description implemented from its text (math only, nothing of secagg/)."""
    import math

    n, degree, threshold = i["n"], i["degree"], i["threshold"]
    gamma, delta, bits, untrusted = i["corrupt_fraction"], i["dropout_fraction"], \
        i["security_bits"] + i["grinding_bits"], i["untrusted"]
    corrupt = math.floor(gamma * n + 1e-9)

    def tail(k: int, s: int, p: float) -> float:
        if s > k:
            return -math.inf
        if s <= p * k:
            return 0.0
        if p <= 0:
            return -math.inf
        a = s / k
        d = -math.log(p) if a >= 1 else a * math.log(a / p) + (1 - a) * math.log((1 - a) / (1 - p))
        return -k * d / math.log(2)

    def t_floor(k: int) -> int | None:
        m = k + 1
        if k >= n - 1:
            t = (m + corrupt) // 2 + 1
            return t if t <= m else None
        p = min(1.0, corrupt / (n - 1))
        return next(t for t in range(m // 2 + 1, m + 1) if tail(k, 2 * t - m, p) <= -bits - math.log2(n))

    def connected(k: int) -> bool:
        bad = gamma + delta
        return k >= n - 1 or bad == 0 or math.log2(n) + (k // 2) * math.log2(bad) <= -bits

    def safety() -> tuple[int, int]:
        bad = gamma + delta
        if bad == 0:
            k = min(2, n - 1)
        else:
            half = math.ceil((bits + math.log2(n)) / -math.log2(bad))
            k = max(2, 2 * half) if 2 * half < n - 1 else n - 1
        t = t_floor(k)
        assert t is not None
        return k, t

    def live(k: int) -> int:
        m = k + 1
        if k >= n - 1:
            return n - math.ceil(delta * n - 1e-9)
        t = m
        while t > 1 and tail(k, m - t + 1, delta) > -20 - math.log2(n):
            t -= 1
        return t

    f_degree, f_threshold = safety()
    m = degree + 1
    complete = degree >= n - 1
    if not complete and degree < f_degree:
        verdict = "degree"
    else:
        least = t_floor(degree)
        if complete and untrusted > corrupt:
            least = (m + untrusted) // 2 + 1
        if least is None or least > m or threshold < least or untrusted >= 2 * threshold - m:
            verdict = "threshold"
        else:
            verdict = "ok"
    plan = None
    for k in range(f_degree, n - 1, 2):
        t = t_floor(k)
        if t is not None and t <= live(k):
            plan = (k, t)
            break
    if plan is None:
        plan = (n - 1, t_floor(n - 1))
    return {"corrupt_count": corrupt, "safety_floor": {"degree": f_degree, "threshold": f_threshold},
            "threshold_floor": t_floor(degree), "connected": connected(degree), "check": verdict,
            "plan": {"degree": plan[0], "threshold": plan[1]}}


def test_safety_floor_vectors_follow_from_their_description():
    """Every case, recomputed from the topic's description (what a port implements), and the boundaries the cases pin:
    each complete graph of 2..100 for each γ at its threshold ('ok') and one below ('threshold'); each sparse cohort of
    200, 1,000 and 10,000 for each γ and δ at the floor ('ok'), one below its threshold ('threshold') and two below its
    degree ('degree', when sparse)."""
    cases = _cases("safety_floor")
    for case in cases:
        assert _floor_from_the_description(case["input"]) == case["output"], case["input"]
    seen = {(c["input"]["n"], c["input"]["corrupt_fraction"], c["input"]["dropout_fraction"], c["input"]["degree"],
             c["input"]["threshold"], c["input"]["untrusted"]): c["output"] for c in cases
            if (c["input"]["security_bits"], c["input"]["grinding_bits"]) == (40, 40)}
    for gamma in (0.05, 0.2, 1 / 3, 0.45):
        for n in range(2, 101):
            t = (n + int(gamma * n + 1e-9)) // 2 + 1
            assert seen[(n, gamma, 0.15, n - 1, t, 0)]["check"] == "ok"
            assert seen[(n, gamma, 0.15, n - 1, t - 1, 0)]["check"] == "threshold"
        for n in (200, 1000, 10_000):
            for delta in (0.0, 0.05, 0.15):
                at = [o for (n_, g, d, k, t, u), o in seen.items() if (n_, g, d, u) == (n, gamma, delta, 0)
                      and (k, t) == (o["safety_floor"]["degree"], o["safety_floor"]["threshold"])]
                assert at and at[0]["check"] == "ok"
                floor_k, floor_t = at[0]["safety_floor"]["degree"], at[0]["safety_floor"]["threshold"]
                assert seen[(n, gamma, delta, floor_k, floor_t - 1, 0)]["check"] == "threshold"
                if floor_k < n - 1:
                    lower = [o for (n_, g, d, k, t, u), o in seen.items() if (n_, g, d, k) == (n, gamma, delta,
                                                                                              floor_k - 2)]
                    assert lower and all(o["check"] == "degree" and not o["connected"] for o in lower)
    verdicts = {o["check"] for o in seen.values()}
    assert verdicts == {"ok", "degree", "threshold"}


def test_the_ts_sdk_embeds_the_task_schemas_the_kinds_write():
    from tests.support.vectors import TS_TASK_SCHEMAS, render_ts_task_schemas

    assert TS_TASK_SCHEMAS.read_text(encoding="utf-8") == render_ts_task_schemas()


def test_task_parsing_vectors_refuse_bools_floats_and_strings_for_every_integer_field():
    from queries.kind import QueryKindError
    from queries.registry import get_kind

    cases = json.loads((VECTORS / "task_parsing.json").read_text(encoding="utf-8"))["cases"]
    accepted = [c["input"] for c in cases if c["output"]["accepted"]]
    firsts = {c["kind"]: c for c in reversed(accepted)}  # each kind's planned task, which the refused ones spoil
    assert accepted
    for good in accepted:
        kind = get_kind(good["kind"])
        assert kind.task_json(kind.parse_task(good["task"])) == good["task"]  # the wire form round-trips
    for good in firsts.values():
        kind = get_kind(good["kind"])
        for key, value in good["task"].items():
            if isinstance(value, int) and not isinstance(value, bool):
                for bad in (True, 3.7, "3"):
                    refused = [c for c in cases if c["input"] == {"kind": good["kind"], "task": good["task"] | {key: bad}}]
                    assert refused and refused[0]["output"] == {"accepted": False, "field": key}
                    with pytest.raises(QueryKindError, match=f"^task.{key}:"):
                        kind.parse_task(good["task"] | {key: bad})


def _task_models(annotation: object, seen: set[type]) -> None:
    """Every pydantic model reachable from `annotation` (fields, unions, lists, RootModels), into `seen`."""
    import typing

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return
        seen.add(annotation)
        for field in annotation.model_fields.values():
            _task_models(field.annotation, seen)
        return
    for arg in typing.get_args(annotation):
        _task_models(arg, seen)


def test_task_parsing_vectors_refuse_a_task_by_each_rule_across_fields():
    """Each `model_validator` of a kind's task models (a rule the JSON Schema cannot state, which the TS SDK checks
    by hand) has a case naming it in `rule`, refused by `parse_task` and naming the field the vector records."""
    from queries.kind import QueryKindError
    from queries.registry import get_kind

    cases = json.loads((VECTORS / "task_parsing.json").read_text(encoding="utf-8"))["cases"]
    ruled = [c for c in cases if "rule" in c["input"]]
    validators: set[str] = set()
    for name in make_vectors._typed_kinds():
        models: set[type] = set()
        _task_models(get_kind(name).Task, models)
        validators |= {f"{m.__name__}.{v}" for m in models for v in m.__pydantic_decorators__.model_validators}
    assert validators and validators == {c["input"]["rule"].split(":")[0] for c in ruled}
    for case in ruled:
        field = case["output"]["field"]
        assert case["output"]["accepted"] is False and field
        with pytest.raises(QueryKindError, match=f"^task\\.{field}[.:]"):
            get_kind(case["input"]["kind"]).parse_task(case["input"]["task"])
