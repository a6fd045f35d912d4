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
    assert {"randomness", "noise", "key_agreement", "prg", "share_encryption", "shamir", "messages",
            "transcript", "request_signing", "validity", "task_digest", "signed_payloads"} <= set(TOPICS)


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


# -- device protocol 2, checked from the files alone (no code of this repository): what a port relies on ------------


def _cases(name: str) -> list[dict]:
    return json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))["cases"]


DIGEST_FIELDS = ("spec", "query_id", "round", "kind", "source", "task", "secagg", "threat_model", "mode", "noise",
                 "validation", "privacy")


def _members_sorted_by_utf16(pairs: list[tuple[str, object]]) -> list[tuple[str, object]]:
    keys = [k for k, _ in pairs]
    assert keys == sorted(keys, key=lambda k: k.encode("utf-16-be")), keys
    return pairs


def test_task_digest_vectors_are_sha256_of_the_canonical_view():
    cases = _cases("task_digest")
    examples = sorted(p.name for p in (ROOT / "examples").glob("*.json"))
    assert [c["input"]["name"] for c in cases if c["input"]["name"].startswith("examples/")] == [
        f"examples/{name}" for name in examples]
    for case in cases:
        assignment, out = case["input"]["assignment"], case["output"]
        assert hashlib.sha256(b"fa-task-digest/v1\n" + out["canonical"].encode("utf-8")).hexdigest() == out["digest"]
        view = {k: assignment[k] for k in DIGEST_FIELDS if assignment.get(k) is not None}
        assert json.loads(out["canonical"]) == view  # top-level nulls and other members dropped, nothing else
        json.loads(out["canonical"], object_pairs_hook=_members_sorted_by_utf16)  # every object, at every depth
    assert len({c["output"]["digest"] for c in cases}) == len(cases)
    examples = [c["input"]["assignment"] for c in cases if c["input"]["name"].startswith("examples/")]
    assert all(a["query_id"] == "q-vectors" and a["round"] == 0 and "spec" in a and "task" in a for a in examples)


def test_signed_payload_vectors_verify_with_libsodium_and_only_under_their_binding():
    for case in _cases("signed_payloads"):
        i, o = case["input"], case["output"]
        key = nacl.signing.SigningKey(bytes.fromhex(i["identity_private"]))
        public = key.verify_key
        assert bytes(public).hex() == o["public_key"]
        bind = bytes.fromhex(i["session_id"]) + bytes.fromhex(i["task_digest"])
        assert o["binding"] == bind.hex() and len(bind) == 48
        advertise = (b"fa-secagg/v2/advertise/" + bind + struct.pack(">I", i["party"]) + bytes.fromhex(i["c_pk"])
                     + bytes.fromhex(i["s_pk"]))
        n, members = i["survivors"]["n"], i["survivors"]["members"]
        bitmap = bytearray((n + 7) // 8)
        for p in members:
            bitmap[(p - 1) // 8] |= 1 << ((p - 1) % 8)
        bitmap = struct.pack(">I", n) + bytes(bitmap)
        consistency = b"fa-secagg/v2/consistency/" + bind + bitmap
        assert (o["advertise_payload"], o["survivors_bitmap"], o["consistency_payload"]) == (
            advertise.hex(), bitmap.hex(), consistency.hex())
        for payload, sig in ((advertise, o["advertise_signature"]), (consistency, o["consistency_signature"])):
            assert key.sign(payload).signature.hex() == sig  # deterministic (RFC 8032)
            public.verify(payload, bytes.fromhex(sig))
            other = payload.replace(bind, bind[:16] + bytes(a ^ 1 for a in bind[16:]), 1)
            with pytest.raises(nacl.exceptions.BadSignatureError):
                public.verify(other, bytes.fromhex(sig))  # another task: refused
        # the session-free signature over the bare keys (AdvertiseKeys, PeerKeys entries)
        keys = b"fa-secagg/v2/keys/" + bytes.fromhex(i["c_pk"]) + bytes.fromhex(i["s_pk"])
        assert o["keys_payload"] == keys.hex() and bind.hex() not in o["keys_payload"]
        assert key.sign(keys).signature.hex() == o["keys_signature"]
        public.verify(keys, bytes.fromhex(o["keys_signature"]))
        for other in (b"fa-secagg/v2/keys/" + bytes.fromhex(i["s_pk"]) + bytes.fromhex(i["c_pk"]), advertise):
            with pytest.raises(nacl.exceptions.BadSignatureError):
                public.verify(other, bytes.fromhex(o["keys_signature"]))  # swapped keys, or the bound payload


def test_key_agreement_and_share_vectors_bind_the_task_digest():
    for case in _cases("key_agreement"):
        i, o = case["input"], case["output"]
        bind = i["session_id"] + i["task_digest"]
        assert o["binding"] == bind
        lo, hi = sorted((i["a_party"], i["b_party"]))
        pair = bind + struct.pack(">II", lo, hi).hex()
        assert o["channel_info"] == b"fa-secagg/v2/channel/".hex() + pair
        assert o["pairmask_info"] == b"fa-secagg/v2/pairmask/".hex() + pair
        assert o["selfmask_info"] == b"fa-secagg/v2/selfmask/".hex() + bind + struct.pack(">I", i["a_party"]).hex()
    for case in _cases("share_encryption"):
        i, o = case["input"], case["output"]
        assert o["associated_data"] == (b"fa-secagg/v2/share/".hex() + i["session_id"] + i["task_digest"]
                                        + struct.pack(">II", i["sender"], i["receiver"]).hex())
    cases = {c["input"]["task_digest"]: c["output"] for c in _cases("key_agreement")}
    assert len(cases) == len(_cases("key_agreement"))  # the digest changes every derived key
    assert len({o["channel_key"] for o in cases.values()}) == len(cases)


def test_transcripts_sign_and_relay_every_party_s_keys_in_every_threat_model():
    """Each AdvertiseKeys carries the sender's signature over its bare keys, relayed unchanged with those keys in
    every PeerKeys entry; each ShareKeys carries the sender's signature over its advertised keys bound to session ‖
    task digest, and each RoutedShares carries its senders' signatures in order — parsed from the bytes by hand."""
    models = set()
    for case in _cases("transcript"):
        i, o = case["input"], case["output"]
        models.add(i["threat_model"])
        assert i["task_digest"] != "00" * 32
        bind = bytes.fromhex(i["session_id"]) + bytes.fromhex(i["task_digest"])
        ids = {int(p): nacl.signing.VerifyKey(bytes.fromhex(s["identity_public"]))
               for p, s in o["party_secrets"].items()}
        keys, key_sigs, sigs = {}, {}, {}
        kinds = set()
        for m in o["messages"]:
            data = bytes.fromhex(m["bytes"])
            assert data[:3] == b"SA\x02"
            body, party = data[24:], m["party"]
            if m["type"] == "AdvertiseKeys":
                keys[party] = body[:64]
                assert len(body) == 64 + 4 + 64 and struct.unpack(">I", body[64:68]) == (64,)
                key_sigs[party] = body[68:]
                ids[party].verify(b"fa-secagg/v2/keys/" + keys[party], key_sigs[party])  # session-free
            elif m["type"] == "PeerKeys":
                (count,) = struct.unpack(">I", body[:4])
                pos, relayed = 4, []
                for _ in range(count):
                    (peer,) = struct.unpack(">I", body[pos : pos + 4])
                    assert body[pos + 4 : pos + 68] == keys[peer] and body[pos + 68 : pos + 72] == struct.pack(">I", 64)
                    assert body[pos + 72 : pos + 136] == key_sigs[peer]
                    relayed.append(peer)
                    pos += 136
                assert pos == len(body) and party in relayed
            elif m["type"] == "ShareKeys":
                (length,) = struct.unpack(">I", body[:4])
                assert length == 64
                sigs[party] = body[4:68]
                payload = b"fa-secagg/v2/advertise/" + bind + struct.pack(">I", party) + keys[party]
                ids[party].verify(payload, sigs[party])
                assert struct.unpack(">I", body[68:72]) == (0,)  # members_wanted: the graph is complete
            elif m["type"] == "RoutedShares":
                (count,) = struct.unpack(">I", body[:4])
                pos, senders = 4, []
                for _ in range(count):
                    sender, length = struct.unpack(">II", body[pos : pos + 8])
                    senders.append(sender)
                    pos += 8 + length
                assert struct.unpack(">I", body[pos : pos + 4]) == (count,)
                pos += 4
                for sender in senders:
                    assert body[pos : pos + 4] == struct.pack(">I", 64) and body[pos + 4 : pos + 68] == sigs[sender]
                    pos += 68
                assert body[pos:] == struct.pack(">I", 0)  # no member entries
            kinds.add(m["type"])
        assert {"AdvertiseKeys", "PeerKeys", "ShareKeys", "RoutedShares"} <= kinds
    assert models == {"semi_honest", "active"}


def _blob(sig_hex: str) -> str:
    return struct.pack(">I", len(sig_hex) // 2).hex() + sig_hex


def test_message_vectors_cover_the_protocol_2_layouts():
    cases = [c["input"] for c in _cases("messages")]
    adverts = [c["fields"] for c in cases if c["type"] == "AdvertiseKeys"]
    assert all(set(f) <= {"c_pk", "s_pk", "signature"} for f in adverts)
    assert any(not f.get("signature") for f in adverts) and any(len(f.get("signature", "")) == 128 for f in adverts)
    entries = [e for c in cases if c["type"] == "PeerKeys" for e in c["fields"]["peers"]]
    assert all(set(e) <= {"party", "c_pk", "s_pk", "signature"} for e in entries)
    assert any(not e.get("signature") for e in entries) and any(len(e.get("signature", "")) == 128 for e in entries)
    for case in _cases("messages"):  # the key signature's layout, from the bytes: a u32 length, then 0 or 64 bytes
        i, body = case["input"], case["output"]["bytes"][48:]
        if i["type"] == "AdvertiseKeys":
            f = i["fields"]
            assert body == f["c_pk"] + f["s_pk"] + _blob(f.get("signature", ""))
        elif i["type"] == "PeerKeys":
            peers = i["fields"]["peers"]
            assert body == struct.pack(">I", len(peers)).hex() + "".join(
                struct.pack(">I", e["party"]).hex() + e["c_pk"] + e["s_pk"] + _blob(e.get("signature", ""))
                for e in peers)
    share_keys = [c["fields"] for c in cases if c["type"] == "ShareKeys"]
    assert any(f["signature"] == "" for f in share_keys) and any(len(f["signature"]) == 128 for f in share_keys)
    assert any(f["members_wanted"] > 0 for f in share_keys)
    routed = [c["fields"] for c in cases if c["type"] == "RoutedShares"]
    assert any(f["signatures"] for f in routed) and any(f["members"] for f in routed)
    assert any(not f["signatures"] for f in routed)


def test_key_signatures_of_a_wrong_length_in_the_message_vectors_are_refused():
    """The signed AdvertiseKeys / PeerKeys vectors decode; with one key signature cut to 63 bytes (its length prefix
    adjusted, so the message is otherwise well formed) or grown to 65, the codec refuses with MessageFormatError."""
    from secagg.errors import MessageFormatError
    from secagg.messages import decode

    checked = 0
    for case in _cases("messages"):
        i, data = case["input"], bytes.fromhex(case["output"]["bytes"])
        sigs = [i["fields"].get("signature", "")] if i["type"] == "AdvertiseKeys" else [
            e.get("signature", "") for e in i["fields"].get("peers", [])]
        for sig in filter(None, sigs):
            blob = _blob(sig)
            assert data.hex().count(blob) == 1
            decode(data)
            for wrong in (sig[:-2], sig + "00"):
                bad = data.hex().replace(blob, _blob(wrong))
                with pytest.raises(MessageFormatError, match="signature"):
                    decode(bytes.fromhex(bad))
            checked += 1
    assert checked >= 3  # one signed AdvertiseKeys, two signed PeerKeys entries


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
                        kind.contribute(good["task"] | {key: bad}, [], np.random.default_rng(0))
