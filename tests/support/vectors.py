"""Writes the frozen known-answer vectors under tests/vectors/ (one JSON file per topic; docs/vectors.md).

    python -m tests.support.vectors           # rewrite every file
    python -m tests.support.vectors --check   # exit 1 if any file differs from what the code computes now

A topic is one function registered with `@topic(name, description, cases)`: it maps one case's JSON
input to its JSON output, using only that input (so a port in another language can do the same). Output
is deterministic: the same code writes byte-identical files. Regenerating changed vectors is a protocol
change: allowed only together with a version bump (docs/vectors.md).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ROOT = Path(__file__).resolve().parents[2]
from fa_common.canonical import canonical_json
from queries.dp import noise
from queries.kind import contribution_generator
from queries.registry import get_kind
from queries import task_digest as td
from queries.envelope import (
    Assignment,
    AssignmentPrivacy,
    HDR_NONCE,
    HDR_PROTOCOL,
    HDR_SIGNATURE,
    HDR_TIMESTAMP,
    NoiseBlock,
    PROTOCOL_VERSION,
    SIGNING_DOMAIN,
    device_id_for,
    signing_payload,
)
from secagg import blind_rsa, crypto, encoding, floor, identity_token, messages, randomness, shamir
from secagg.client import ClientSession
from secagg.config import SecAggConfig
from secagg.graph import NeighbourGraph
from secagg.phases import Phase
from secagg.randomness import SeededRandom
from secagg.server import ServerSession
from queries.spec import QuerySpec
from secagg import validity
from secagg.validity import group as vgroup
from secagg.validity import layout as vlayout
from secagg.validity import transcript as vtranscript

VECTORS = ROOT / "tests" / "vectors"
Json = dict[str, Any]


@dataclass(frozen=True)
class Topic:
    name: str
    description: str
    cases: list[Json]
    compute: Callable[[Json], Json]


TOPICS: dict[str, Topic] = {}


def topic(name: str, description: str, cases: list[Json]) -> Callable[[Callable[[Json], Json]], Callable[[Json], Json]]:
    def register(fn: Callable[[Json], Json]) -> Callable[[Json], Json]:
        TOPICS[name] = Topic(name, description, cases, fn)
        return fn

    return register


def versions() -> Json:
    """What the vectors are pinned to; a change here is a protocol change."""
    return {
        "secagg_wire": messages.VERSION,
        "secagg_hkdf_domain": crypto.DOMAIN.decode(),
        "task_digest_domain": td.DOMAIN.decode(),
        "device_signing_domain": SIGNING_DOMAIN.decode(),
        "seeded_random_domain": randomness.DOMAIN.decode(),
        "seeded_random_child_domain": randomness.CHILD_DOMAIN.decode(),
    }


def render(name: str) -> str:
    t = TOPICS[name]
    doc = {
        "topic": t.name,
        "description": t.description,
        "versions": versions(),
        "cases": [{"input": case, "output": t.compute(case)} for case in t.cases],
    }
    return _dump(doc, 0) + "\n"


def _dump(value: Any, level: int) -> str:
    """JSON with one-space indentation; lists of scalars stay on one line."""
    pad, inner = " " * level, " " * (level + 1)
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_dump(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + _dump(v, level + 1) for v in value) + "\n" + pad + "]"
    return json.dumps(value, ensure_ascii=False)


# -- encodings (docs/vectors.md: bytes are lowercase hex; integers that may exceed 2^53 are decimal strings)


def h(data: bytes) -> str:
    return bytes(data).hex()


def unh(text: str) -> bytes:
    return bytes.fromhex(text)


def big(values: Any) -> list[str]:
    return [str(int(v)) for v in values]


def words_json(arr: np.ndarray) -> list[Any]:
    return big(arr) if arr.dtype.itemsize > 4 else [int(v) for v in arr]


class WordSource:
    """The given uint64 words (8 little-endian bytes each), then the SeededRandom stream of `then_seed`."""

    def __init__(self, words: list[str], then_seed: bytes) -> None:
        self._data = b"".join(int(w).to_bytes(8, "little") for w in words)
        self._pos = 0
        self._then = SeededRandom(then_seed)

    def bytes(self, n: int) -> bytes:
        out = self._data[self._pos : self._pos + n]
        self._pos += len(out)
        return out + self._then.bytes(n - len(out))


def seeded(case: Json, path: list[str] | None = None) -> Any:
    src: Any = SeededRandom(unh(case["seed"]))
    for label in path if path is not None else case.get("child_path", []):
        src = src.child(label)
    return src


# -- topics ------------------------------------------------------------------------------------------


@topic(
    "randomness",
    "SeededRandom streams, children and the helpers' byte consumption, applied in order to one source.",
    [
        {"seed": "", "child_path": [], "draws": [["bytes", 64]]},
        {"seed": h(b"fa-vectors"), "child_path": [], "draws": [["bytes", 1], ["bytes", 31], ["bytes", 32]]},
        {"seed": h(b"fa-vectors"), "child_path": ["noise"], "draws": [["bytes", 48]]},
        {"seed": h(b"fa-vectors"), "child_path": ["contribution/0011", "secagg"], "draws": [["bytes", 48]]},
        {
            "seed": h(bytes(range(32))),
            "child_path": [],
            "draws": [
                ["randbelow", "1"], ["randbelow", "2"], ["randbelow", "10"], ["randbelow", "256"],
                ["randbelow", "1000"], ["randbelow", str(shamir.PRIME)], ["random"], ["random"],
                ["sample", 10, 4], ["uint64s", 3], ["keyed_stream_bytes", 32], ["bytes", 8],
            ],
        },
    ],
)
def randomness_vectors(case: Json) -> Json:
    src = seeded(case)
    out: list[Any] = []
    for op, *args in case["draws"]:
        if op == "bytes":
            out.append(h(src.bytes(args[0])))
        elif op == "randbelow":
            out.append(str(src.randbelow(int(args[0]))))
        elif op == "random":
            out.append(src.random())
        elif op == "sample":
            out.append(src.sample(list(range(args[0])), args[1]))
        elif op == "uint64s":
            out.append(big(randomness.uint64s(src, args[0])))
        elif op == "keyed_stream_bytes":
            out.append(h(randomness.keyed_stream(src).bytes(args[0])))
        else:
            raise ValueError(f"unknown draw {op!r}")
    return {"results": out}


_EDGE_WORDS = [str(w) for w in (0, 1, 2**11 - 1, 2**11, 2**63, 2**63 + 1, 2**64 - 2**11, 2**64 - 1, 0x0123456789ABCDEF)]


def _noise_case(sampler: str, scale: float, size: int = 64, words: list[str] | None = None) -> Json:
    seed = h(f"noise/{sampler}/{scale:g}".encode())
    source: Json = {"seed": seed} if words is None else {"words": words, "then_seed": seed}
    return {**source, "sampler": sampler, "scale": scale, "size": size}


@topic(
    "noise",
    "DP noise samplers (queries/dp/noise.py): values from a SeededRandom ('seed') or from given uint64 "
    "words, then the SeededRandom of 'then_seed'; the number of surplus bytes read after the last value is free.",
    [
        _noise_case("uniform", 0, 16),
        _noise_case("uniform", 0, len(_EDGE_WORDS), _EDGE_WORDS),
        *(_noise_case("discrete_gaussian", s) for s in (0.8, 2.5, 40.0, 1e6)),
        *(_noise_case("skellam", m) for m in (0.5, 3.0, 50.0, 1e7)),
        _noise_case("discrete_laplace", 3),
        _noise_case("discrete_laplace", 1000, len(_EDGE_WORDS), _EDGE_WORDS),
        _noise_case("poisson", 4.0),
        _noise_case("poisson", 9.9, len(_EDGE_WORDS), _EDGE_WORDS),
        _noise_case("poisson", 30.0),
        _noise_case("poisson", 2e6),
        _noise_case("poisson", 2e6, 8, _EDGE_WORDS),
        _noise_case("discrete_gaussian", 40.0, 8, _EDGE_WORDS),
        _noise_case("none", 5.0, 4),
    ],
)
def noise_vectors(case: Json) -> Json:
    src = WordSource(case["words"], unh(case["then_seed"])) if "words" in case else seeded(case)
    kind, scale, size = case["sampler"], case["scale"], case["size"]
    if kind == "uniform":
        return {"values": [float(u) for u in noise._uniforms(randomness.uint64s(src, size))]}
    if kind == "discrete_laplace":
        values = noise.sample_discrete_laplace(int(scale), size, src)
    elif kind == "poisson":
        values = noise.sample_poisson(scale, size, src)
    else:
        values = noise.sample_noise(kind, scale, size, src)
    return {"values": [int(v) for v in values]}


def _root(label: str) -> str:
    """A members root for a vector case: 32 bytes (any value; `members` shows how a list of leaves gives one)."""
    return h(hashlib.sha256(b"vectors/members-root/" + label.encode()).digest())


@topic(
    "key_agreement",
    "X25519 public keys and shared secret from private bytes; the binding (session id ‖ task digest), the round binding "
    "(binding ‖ members root: what every key after phase 0 is bound to), the graph seed (HKDF keyed by the members root, "
    "info DOMAIN ‖ 'graph/' ‖ binding) and the HKDF-SHA256 channel, pair-mask and self-mask keys under the round binding "
    "(info strings included).",
    [
        {
            "a_private": h(bytes(range(32))),
            "b_private": h(bytes(range(32, 64))),
            "session_id": h(bytes(range(0xA0, 0xB0))),
            "task_digest": h(bytes(range(0x40, 0x60))),
            "members_root": h(bytes(range(0x80, 0xA0))),
            "a_party": 7,
            "b_party": 3,
            "self_mask_seed": h(bytes([0x5A]) * 32),
        },
        {
            "a_private": h(SeededRandom(b"ka/a").bytes(32)),
            "b_private": h(SeededRandom(b"ka/b").bytes(32)),
            "session_id": h(SeededRandom(b"ka/session").bytes(16)),
            "task_digest": h(hashlib.sha256(b"ka/task").digest()),
            "members_root": _root("ka/2"),
            "a_party": 1,
            "b_party": 1000,
            "self_mask_seed": h(SeededRandom(b"ka/b_u").bytes(32)),
        },
        {
            "a_private": h(SeededRandom(b"ka/a").bytes(32)),
            "b_private": h(SeededRandom(b"ka/b").bytes(32)),
            "session_id": h(SeededRandom(b"ka/session").bytes(16)),
            "task_digest": h(crypto.NO_TASK),
            "members_root": _root("ka/2"),
            "a_party": 1,
            "b_party": 1000,
            "self_mask_seed": h(SeededRandom(b"ka/b_u").bytes(32)),
        },
        {
            "a_private": h(SeededRandom(b"ka/a").bytes(32)),
            "b_private": h(SeededRandom(b"ka/b").bytes(32)),
            "session_id": h(SeededRandom(b"ka/session").bytes(16)),
            "task_digest": h(hashlib.sha256(b"ka/task").digest()),
            "members_root": _root("ka/4"),
            "a_party": 1,
            "b_party": 1000,
            "self_mask_seed": h(SeededRandom(b"ka/b_u").bytes(32)),
        },
    ],
)
def key_agreement_vectors(case: Json) -> Json:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    a = X25519PrivateKey.from_private_bytes(unh(case["a_private"]))
    b_raw = unh(case["b_private"])
    u, v = case["a_party"], case["b_party"]
    bind = crypto.binding(unh(case["session_id"]), unh(case["task_digest"]))
    root = unh(case["members_root"])
    rbind = crypto.round_binding(bind, root)
    shared = crypto.agree(a, crypto.x25519_public_of(b_raw))
    b = X25519PrivateKey.from_private_bytes(b_raw)
    assert shared == crypto.agree(b, crypto.x25519_public_of(unh(case["a_private"])))
    lo, hi = min(u, v), max(u, v)
    pair = rbind + struct.pack(">II", lo, hi)
    graph_info = crypto.DOMAIN + b"graph/" + bind
    assert crypto.graph_seed(bind, root) == crypto.hkdf(root, graph_info)
    return {
        "a_public": h(crypto.x25519_public_of(unh(case["a_private"]))),
        "b_public": h(crypto.x25519_public_of(b_raw)),
        "shared_secret": h(shared),
        "binding": h(bind),
        "round_binding": h(rbind),
        "graph_seed_info": h(graph_info),
        "graph_seed": h(crypto.graph_seed(bind, root)),
        "channel_info": h(crypto.DOMAIN + b"channel/" + pair),
        "channel_key": h(crypto.channel_key(shared, rbind, u, v)),
        "pairmask_info": h(crypto.DOMAIN + b"pairmask/" + pair),
        "pairmask_key": h(crypto.pair_mask_key(shared, rbind, u, v)),
        "selfmask_info": h(crypto.DOMAIN + b"selfmask/" + rbind + struct.pack(">I", u)),
        "selfmask_key": h(crypto.self_mask_key(unh(case["self_mask_seed"]), rbind, u)),
    }


@topic(
    "prg",
    "The mask PRG: AES-256-CTR keystream (zero IV) for a key, read as little-endian words of the work "
    "type (uint32 for bits ≤ 32, else uint64), and the mask reduced mod 2^bits.",
    [
        {"key": h(bytes(range(32))), "dim": 8, "bits": 16},
        {"key": h(bytes(range(32))), "dim": 8, "bits": 32},
        {"key": h(bytes(range(32))), "dim": 5, "bits": 40},
        {"key": h(SeededRandom(b"prg/key").bytes(32)), "dim": 9, "bits": 13},
        {"key": h(SeededRandom(b"prg/key2").bytes(32)), "dim": 4, "bits": 62},
    ],
)
def prg_vectors(case: Json) -> Json:
    cfg_dtype = np.dtype(np.uint32) if case["bits"] <= 32 else np.dtype(np.uint64)
    stream = crypto.MaskStream(case["dim"], cfg_dtype)
    words = stream.expand(unh(case["key"])).copy()
    reduced = words & cfg_dtype.type((1 << case["bits"]) - 1)
    return {
        "work_type": cfg_dtype.name,
        "keystream": h(words.astype(cfg_dtype.newbyteorder("<")).tobytes()),
        "words": words_json(words),
        "mask_mod_2_bits": words_json(reduced),
    }


@topic(
    "neighbour_graph",
    "The SecAgg+ Harary graph: the graph seed (HKDF keyed by the members root, info DOMAIN ‖ 'graph/' ‖ session ‖ task "
    "digest; `members` shows the root of a members list), prg_uint64 words, ring order and closed neighbourhoods.",
    [
        {"session_id": h(bytes(range(16))), "task_digest": h(bytes(32)), "members_root": h(bytes(range(32))),
         "n": 12, "degree": 4, "parties": [1, 2, 12]},
        {"session_id": h(SeededRandom(b"graph/session").bytes(16)), "task_digest": h(hashlib.sha256(b"graph/task").digest()),
         "members_root": _root("graph/120"), "n": 120, "degree": 42, "parties": [1, 60, 120]},
        {"session_id": h(SeededRandom(b"graph/session").bytes(16)), "task_digest": h(hashlib.sha256(b"graph/task").digest()),
         "members_root": _root("graph/120-other-root"), "n": 120, "degree": 42, "parties": [1, 60, 120]},
        {"session_id": h(SeededRandom(b"graph/session/1000").bytes(16)),
         "task_digest": h(hashlib.sha256(b"graph/task/1000").digest()), "members_root": _root("graph/1000"),
         "n": 1000, "degree": 172, "parties": [1, 500, 1000]},
    ],
)
def neighbour_graph_vectors(case: Json) -> Json:
    bind = crypto.binding(unh(case["session_id"]), unh(case["task_digest"]))
    seed = crypto.graph_seed(bind, unh(case["members_root"]))
    graph = NeighbourGraph(case["n"], case["degree"], seed)
    order, _ = graph._ring  # the ring is the protocol object a port must reproduce
    return {
        "binding": h(bind),
        "graph_seed": h(seed),
        "prg_uint64": big(crypto.prg_uint64(seed, case["n"])),
        "ring_order": [int(p) for p in order],
        "closed_neighbourhoods": {str(p): list(graph.closed(p)) for p in case["parties"]},
    }


@topic(
    "share_encryption",
    "AES-256-GCM share transport: nonce = 'shr0' ‖ sender (u32 BE) ‖ 4 zero bytes; associated data = "
    "DOMAIN ‖ 'share/' ‖ round binding (session ‖ task digest ‖ members root) ‖ sender ‖ receiver (u32 BE); ciphertext "
    "includes the 16-byte tag.",
    [
        {
            "key": h(bytes(range(32))),
            "session_id": h(bytes(range(16))),
            "task_digest": h(bytes(range(0x40, 0x60))),
            "members_root": h(bytes(range(0x60, 0x80))),
            "sender": 1,
            "receiver": 2,
            "plaintext": h(struct.pack(">II33s33s", 1, 2, bytes(range(33)), bytes(range(33, 66)))),
        },
        {
            "key": h(SeededRandom(b"gcm/key").bytes(32)),
            "session_id": h(SeededRandom(b"gcm/session").bytes(16)),
            "task_digest": h(hashlib.sha256(b"gcm/task").digest()),
            "members_root": _root("gcm/2"),
            "sender": 513,
            "receiver": 7,
            "plaintext": h(struct.pack(">II33s33s", 513, 7, SeededRandom(b"b").bytes(33), SeededRandom(b"s").bytes(33))),
        },
    ],
)
def share_encryption_vectors(case: Json) -> Json:
    key, s, r, pt = unh(case["key"]), case["sender"], case["receiver"], unh(case["plaintext"])
    bind = crypto.round_binding(crypto.binding(unh(case["session_id"]), unh(case["task_digest"])),
                                unh(case["members_root"]))
    ct = crypto.seal_share(key, bind, s, r, pt)
    assert crypto.open_share(key, bind, s, r, ct) == pt
    return {
        "nonce": h(struct.pack(">4sI4x", b"shr0", s)),
        "associated_data": h(crypto.share_aad(bind, s, r)),
        "ciphertext": h(ct),
    }


@topic(
    "shamir",
    "Shamir sharing over GF(2^256 + 297): coefficients 1..t−1 = randbelow(PRIME) from a SeededRandom, "
    "shares at x = party ids (33-byte big-endian), Lagrange coefficients and reconstruction.",
    [
        {"secret": h(bytes(range(32))), "xs": [1, 2, 3], "threshold": 2, "seed": h(b"shamir/1"), "reconstruct_from": [2, 3]},
        {
            "secret": h(b"\xff" * 32),
            "xs": list(range(1, 11)),
            "threshold": 7,
            "seed": h(b"shamir/2"),
            "reconstruct_from": [1, 3, 4, 5, 8, 9, 10],
        },
    ],
)
def shamir_vectors(case: Json) -> Json:
    secret = shamir.ints_from_secret(unh(case["secret"]))
    coeff_src = seeded(case, [])
    coeffs = [coeff_src.randbelow(shamir.PRIME) for _ in range(case["threshold"] - 1)]
    shares = shamir.split(secret, case["xs"], case["threshold"], seeded(case, []))
    subset = case["reconstruct_from"]
    lam = shamir.lagrange_at_zero(subset)
    value = shamir.BatchReconstructor(case["threshold"]).reconstruct({x: shares[x] for x in subset}, "secret", "vectors")
    return {
        "prime": str(shamir.PRIME),
        "coefficients": [h(shamir.to_bytes(c)) for c in coeffs],
        "shares": {str(x): h(shamir.to_bytes(y)) for x, y in shares.items()},
        "lagrange_at_zero": [str(c) for c in lam],
        "reconstructed": h(shamir.secret_from_int(value)),
    }


def _bitmap(spec: Json) -> bytes:
    return messages.encode_bitmap(frozenset(spec["members"]), spec["n"])


def build_message(case: Json) -> messages.Message:
    f, sid, p = case["fields"], unh(case["session_id"]), case["party"]
    t = case["type"]
    if t == "AdvertiseKeys":
        return messages.AdvertiseKeys(sid, p, unh(f["c_pk"]), unh(f["s_pk"]), unh(f.get("signature", "")))
    if t == "PeerKeys":
        peers = tuple(messages.PeerEntry(e["party"], unh(e["identity"]), unh(e["c_pk"]), unh(e["s_pk"]),
                                         unh(e.get("signature", "")), unh(e.get("token", "")))
                      for e in f["peers"])
        return messages.PeerKeys(sid, p, peers, b"".join(unh(leaf) for leaf in f["leaves"]))
    cts = tuple((v, unh(ct)) for v, ct in f.get("ciphertexts", ()))
    if t == "ShareKeys":
        return messages.ShareKeys(sid, p, cts, unh(f["signature"]), f["members_wanted"])
    if t == "RoutedShares":
        members = tuple(
            messages.MemberEntry(e["party"], unh(e["identity"]), unh(e["c_pk"]), unh(e["s_pk"]), unh(e["signature"]))
            for e in f["members"]
        )
        return messages.RoutedShares(sid, p, cts, members, tuple(unh(x) for x in f.get("member_tokens", ())))
    if t == "MaskedInput":
        packed = encoding.pack(np.array(f["values"], dtype=np.uint64), f["bits"])
        return messages.MaskedInput(sid, p, f["bits"], len(f["values"]), packed)
    if t == "MaskedInputProved":
        packed = encoding.pack(np.array(f["values"], dtype=np.uint64), f["bits"])
        return messages.MaskedInputProved(sid, p, f["bits"], len(f["values"]), packed, unh(f["proof"]))
    if t == "ConsistencyRequest":
        return messages.ConsistencyRequest(sid, p, _bitmap(f["survivors"]))
    if t == "ConsistencySignature":
        return messages.ConsistencySignature(sid, p, unh(f["signature"]))
    if t == "UnmaskRequest":
        return messages.UnmaskRequest(sid, p, _bitmap(f["survivors"]), tuple((q, unh(s)) for q, s in f["signatures"]))
    if t == "UnmaskShares":
        return messages.UnmaskShares(sid, p, tuple((v, k, unh(s)) for v, k, s in f["shares"]))
    raise ValueError(f"unknown message type {t!r}")


def _k(label: str, n: int = 32) -> str:
    return h(SeededRandom(b"messages/" + label.encode()).bytes(n))


SID = h(bytes(range(0xC0, 0xD0)))


def _peer(party: int, identity: bool = True, signature: bool = False, token: bool = False) -> Json:
    """A PeerKeys entry of fixed made-up bytes (`identity=False`: the 32 zero bytes of a session without identities)."""
    e: Json = {"party": party, "identity": _k(f"id{party}") if identity else h(bytes(32)), "c_pk": _k(f"c{party}"),
               "s_pk": _k(f"s{party}")}
    if signature:
        e["signature"] = _k(f"ks{party}", 64)
    if token:
        e["token"] = _k(f"tok{party}", 354)
    return e


def _leaves(n: int, absent: tuple[int, ...] = ()) -> list[str]:
    """A members list of made-up leaves for parties 1..n (`absent`: zero leaves, parties that did not advertise); the
    codec does not look inside (`members` computes real ones)."""
    return [h(crypto.ABSENT_LEAF) if p in absent else _k(f"leaf{p}", crypto.MEMBER_LEAF_BYTES) for p in range(1, n + 1)]


@topic(
    "messages",
    "Every secagg wire message (secagg/messages.py) from fixed fields: the 24-byte header (magic 'SA', "
    "version, type, session id, party as u32 BE) and the body. Protocol 3: AdvertiseKeys carries the session-free key "
    "signature (a blob: empty or 64 bytes); a PeerKeys entry is party ‖ identity key ‖ c_pk ‖ s_pk ‖ blob(key signature) "
    "‖ blob(issuer token: empty or 354 bytes), and the entries are followed by the members list (u32 count, then one "
    "16-byte leaf per party 1..n); ShareKeys carries the sender's signature and members_wanted; RoutedShares carries the "
    "ciphertexts and member entries (no sender's signature: a share that opens under its channel key, bound to the "
    "round binding, is its sender's word), then (optional, only with identity tokens) the members' tokens (u32 count, then u32 length ‖ 354 bytes each; docs/identities.md; the senders' came with the "
    "peer keys). MaskedInput packs values at `bits` bits.",
    [
        {"type": "AdvertiseKeys", "session_id": SID, "party": 3, "fields": {"c_pk": _k("c_pk"), "s_pk": _k("s_pk")}},
        {"type": "AdvertiseKeys", "session_id": SID, "party": 3,
         "fields": {"c_pk": _k("c_pk"), "s_pk": _k("s_pk"), "signature": _k("keysig", 64)}},
        {"type": "PeerKeys", "session_id": SID, "party": 1,
         "fields": {"peers": [_peer(1, identity=False), _peer(2, identity=False)], "leaves": _leaves(2)}},
        {"type": "PeerKeys", "session_id": SID, "party": 1,
         "fields": {"peers": [_peer(1, signature=True), _peer(2, signature=True)], "leaves": _leaves(3, absent=(3,))}},
        {"type": "PeerKeys", "session_id": SID, "party": 2,
         "fields": {"peers": [_peer(1, signature=True, token=True), _peer(2, signature=True, token=True),
                              _peer(4, signature=True)], "leaves": _leaves(5, absent=(3,))}},
        {"type": "PeerKeys", "session_id": SID, "party": 1, "fields": {"peers": [], "leaves": []}},
        {"type": "ShareKeys", "session_id": SID, "party": 1,
         "fields": {"ciphertexts": [[2, _k("ct12", 90)], [3, _k("ct13", 90)]], "signature": "", "members_wanted": 0}},
        {"type": "ShareKeys", "session_id": SID, "party": 1,
         "fields": {"ciphertexts": [[2, _k("ct12", 90)], [3, _k("ct13", 90)]], "signature": _k("ksig1", 64),
                    "members_wanted": 0}},
        {"type": "ShareKeys", "session_id": SID, "party": 70,
         "fields": {"ciphertexts": [[12, _k("ct7012", 90)]], "signature": _k("ksig70", 64), "members_wanted": 37}},
        {"type": "RoutedShares", "session_id": SID, "party": 2,
         "fields": {"ciphertexts": [[1, _k("ct12", 90)]], "members": []}},
        {"type": "RoutedShares", "session_id": SID, "party": 2,
         "fields": {"ciphertexts": [[1, _k("ct12", 90)], [3, _k("ct32", 90)]], "members": []}},
        {"type": "RoutedShares", "session_id": SID, "party": 12,
         "fields": {"ciphertexts": [[70, _k("ct7012", 90)]], "members": [
             {"party": 5, "identity": _k("id5"), "c_pk": _k("c5"), "s_pk": _k("s5"), "signature": _k("ksig5", 64)},
             {"party": 140, "identity": _k("id140"), "c_pk": _k("c140"), "s_pk": _k("s140"),
              "signature": _k("ksig140", 64)},
         ]}},
        {"type": "RoutedShares", "session_id": SID, "party": 12,
         "fields": {"ciphertexts": [[70, _k("ct7012", 90)]], "members": [
             {"party": 5, "identity": _k("id5"), "c_pk": _k("c5"), "s_pk": _k("s5"), "signature": _k("ksig5", 64)},
         ], "member_tokens": [_k("tok5", 354)]}},
        {"type": "RoutedShares", "session_id": SID, "party": 12,
         "fields": {"ciphertexts": [], "members": [
             {"party": 5, "identity": _k("id5"), "c_pk": _k("c5"), "s_pk": _k("s5"), "signature": _k("ksig5", 64)},
             {"party": 140, "identity": _k("id140"), "c_pk": _k("c140"), "s_pk": _k("s140"),
              "signature": _k("ksig140", 64)},
         ], "member_tokens": [_k("tok5", 354), _k("tok140", 354)]}},
        {"type": "MaskedInput", "session_id": SID, "party": 2, "fields": {"bits": 16, "values": [0, 1, 65535, 4660]}},
        {"type": "MaskedInput", "session_id": SID, "party": 2, "fields": {"bits": 24, "values": [0, 1, 16777215]}},
        {"type": "MaskedInput", "session_id": SID, "party": 2, "fields": {"bits": 13, "values": [8191, 0, 4097, 1, 2]}},
        {"type": "MaskedInput", "session_id": SID, "party": 2,
         "fields": {"bits": 62, "values": [(1 << 62) - 1, 0, 123456789012345]}},
        {"type": "ConsistencyRequest", "session_id": SID, "party": 4,
         "fields": {"survivors": {"n": 10, "members": [1, 2, 4, 9, 10]}}},
        {"type": "ConsistencySignature", "session_id": SID, "party": 4, "fields": {"signature": _k("csig", 64)}},
        {"type": "UnmaskRequest", "session_id": SID, "party": 1,
         "fields": {"survivors": {"n": 3, "members": [1, 2]}, "signatures": []}},
        {"type": "UnmaskRequest", "session_id": SID, "party": 1,
         "fields": {"survivors": {"n": 3, "members": [1, 2, 3]}, "signatures": [[1, _k("u1", 64)], [3, _k("u3", 64)]]}},
        {"type": "UnmaskShares", "session_id": SID, "party": 2,
         "fields": {"shares": [[1, 1, _k("sh1", 33)], [2, 1, _k("sh2", 33)], [3, 2, _k("sh3", 33)]]}},
        {"type": "MaskedInputProved", "session_id": SID, "party": 2,
         "fields": {"bits": 13, "values": [8191, 0, 4097], "proof": _k("proof", 40)}},
    ],
)
def messages_vectors(case: Json) -> Json:
    msg = build_message(case)
    data = msg.encode()
    assert messages.decode(data) == msg
    out = {"type_code": int(msg.TYPE), "header": h(data[: messages.HEADER.size]), "bytes": h(data)}
    if case["type"] in ("MaskedInput", "MaskedInputProved"):
        out["packed"] = h(msg.packed)  # type: ignore[attr-defined]
    return out


_TRANSCRIPT_INPUTS = {"1": [1, 2, 3, 4], "2": [10, 20, 30, 40], "3": [100, 200, 300, 65535], "4": [7, 0, 7, 0],
                      "5": [5, 5, 5, 5], "6": [60000, 1, 2, 3], "7": [0, 0, 0, 1], "8": [8, 16, 32, 64]}


def _transcript_case(name: str, threat: str, drop_before_masked_input: list[int], n: int = 3,
                     degree: int | None = None, drop_before_advertise_keys: tuple[int, ...] = ()) -> Json:
    return {
        "name": name,
        "seed": h(b"transcript/" + name.encode()),
        "session_id": h(SeededRandom(b"transcript/session/" + name.encode()).bytes(16)),
        "task_digest": h(hashlib.sha256(b"transcript/task/" + name.encode()).digest()),
        "n": n,
        "dim": 4,
        "bits": 16,
        "degree": degree,
        "threat_model": threat,
        "inputs": {str(p): _TRANSCRIPT_INPUTS[str(p)] for p in range(1, n + 1)},
        "drop_before_advertise_keys": list(drop_before_advertise_keys),
        "drop_before_masked_input": drop_before_masked_input,
    }


@topic(
    "transcript",
    "Whole cohorts (dim = 4, bits = 16) bound to a task digest: party p draws from "
    "SeededRandom(seed).child('party/<p>') (c_sk, s_sk, b_u, then Shamir coefficients) and its Ed25519 identity key "
    "from child('identity/<p>'). When phase 0 closes the server fixes the members list (one leaf per party over its "
    "identity and keys, zeros for a party that did not advertise), draws the graph from its root and sends each party "
    "its neighbours' entries (identity, keys, key signature) with the list; every later key, associated data and "
    "signature is bound to session ‖ task digest ‖ members root. Each party signs its keys in ShareKeys and the server "
    "checks the signatures; RoutedShares carries the ciphertexts alone (members_wanted is 0), and each party opens its "
    "senders' shares under channel keys bound to that binding before masking. Every message "
    "each party and the server send, in order, and the sum.",
    [
        _transcript_case("semi_honest", "semi_honest", []),
        _transcript_case("semi_honest_drop", "semi_honest", [3]),
        _transcript_case("active", "active", []),
        _transcript_case("semi_honest_absent", "semi_honest", [], n=4, drop_before_advertise_keys=(4,)),
        _transcript_case("sparse", "semi_honest", [5], n=8, degree=4),
    ],
)
def transcript_vectors(case: Json) -> Json:
    degree = case["degree"]
    cfg = SecAggConfig(unh(case["session_id"]), case["n"], case["dim"], case["bits"], threat_model=case["threat_model"],
                       graph="sparse" if degree is not None and degree < case["n"] - 1 else "auto", degree=degree)
    digest = unh(case["task_digest"])
    root = SeededRandom(unh(case["seed"]))
    parties = range(1, cfg.n + 1)
    identities = {p: Ed25519PrivateKey.from_private_bytes(root.child(f"identity/{p}").bytes(32)) for p in parties}
    public = {p: crypto.ed25519_public_bytes(k) for p, k in identities.items()}
    inputs = {p: np.array(case["inputs"][str(p)], dtype=np.uint64) for p in parties}
    clients = {
        p: ClientSession(cfg, p, inputs[p], identities[p], public, randomness=root.child(f"party/{p}"), task_digest=digest)
        for p in parties
    }
    server = ServerSession(cfg, public, task_digest=digest)
    log: list[Json] = []

    def record(phase: Phase, sender: str, party: int, data: bytes) -> None:
        log.append({"phase": phase.label, "from": sender, "party": party,
                    "type": type(messages.decode(data)).__name__, "bytes": h(data)})

    outgoing = {p: c.start() for p, c in clients.items() if p not in case["drop_before_advertise_keys"]}
    while True:
        for p in sorted(outgoing):
            record(server.phase, "client", p, outgoing[p])
            server.receive(p, outgoing[p])
        delivered = server.close_phase()
        if server.phase is Phase.DONE:
            break
        outgoing = {}
        for p in sorted(delivered):
            record(server.phase, "server", p, delivered[p])
            if server.phase is Phase.MASKED_INPUT and p in case["drop_before_masked_input"]:
                continue
            reply = clients[p].receive(delivered[p])
            if reply is not None:
                outgoing[p] = reply
    assert server.result is not None
    secrets_per_party = {}
    for p in parties:
        stream = root.child(f"party/{p}")
        secrets_per_party[str(p)] = {
            "c_sk": h(stream.bytes(32)),
            "s_sk": h(stream.bytes(32)),
            "b_u": h(stream.bytes(32)),
            "identity_public": h(crypto.ed25519_public_bytes(identities[p])),
        }
    assert server.members_root is not None
    return {
        "config": cfg.to_dict(),
        "share_threshold": cfg.share_threshold,
        "party_secrets": secrets_per_party,
        "members_root": h(server.members_root),
        "closed_neighbourhoods": {str(p): list(server.graph.closed(p)) for p in parties},
        "messages": log,
        "sum": [int(v) for v in server.result.vector],
        "contributors": sorted(server.result.contributors),
    }


def _round0_plan(kind: str, params: Json) -> Any:
    """The round the kind plans first for `params`."""
    k = get_kind(kind)
    p = k.parse_params(params)
    plan = k.plan_round(p, k.initial_state(p), 0)
    assert plan is not None
    return plan


def _kind_case(kind: str, params: Json, rows: list[Any], seed: bytes = b"kind/0") -> Json:
    """A case for `kind_encodings`: the task the kind plans for round 0 of `params` (so a port needs no planner)."""
    plan = _round0_plan(kind, params)
    return {"kind": kind, "params": params, "task": plan.task, "rows": rows, "seed": h(seed),
            "plan": {"dim": plan.dim, "max_abs": plan.max_abs}}


def _feature_stats_count_bin_case() -> Json:
    """A `kind_encodings` case of feature_stats' second round with the one count bin per feature that a query with
    validity proofs and no bins carries (`count_second_round`; one mean suppressed: its second moment is 0, its count
    is not)."""
    from queries.feature_stats import FeatureStatsState

    params: Json = {"features": [{"name": "age", "lower": 18, "upper": 90}, {"name": "income", "lower": 0, "upper": 2e5}],
                    "max_examples_per_device": 3, "count_second_round": True}
    k = get_kind("feature_stats")
    plan = k.plan_round(k.parse_params(params), FeatureStatsState(bound=3, stage=1, means=[41.5, None]), 1)
    assert plan is not None
    rows = [{"age": 31.0, "income": 52000.0}, {"age": 64.0}, {"age": 200.0, "income": -5.0}]
    return {"kind": "feature_stats", "params": params, "task": plan.task, "rows": rows, "seed": h(b"kind/0"),
            "plan": {"dim": plan.dim, "max_abs": plan.max_abs}}


def frecency_params(eval_every: int) -> Json:
    """The frecency example's params (2 rounds): round 0 trains (sign votes) or, with eval_every, evaluates."""
    from queries.training import frecency

    return frecency.example_params(rounds=2, eval_every=eval_every)


def frecency_rows() -> list[Any]:
    """Ten simulated URL-bar interactions whose numbers are all non-integral floats or ints (a port in a language that
    reads "12.0" as the integer 12 prints the same canonical JSON for them, so the hold-out split agrees)."""
    from fleet_sim.scenarios import generate

    def plain(v: Any) -> bool:
        if isinstance(v, float):
            return not v.is_integer()
        if isinstance(v, dict):
            return all(plain(x) for x in v.values())
        if isinstance(v, list):
            return all(plain(x) for x in v)
        return True

    rows = [r for i in range(20) for r in generate("frecency", 3, i)["urlbar"] if plain(r)]
    return rows[:10]


_HAND_WRITTEN_ENCODINGS = ("histogram", "feature_stats", "heavy_hitters", "training")
"""Kinds whose encoding cases are written out above; every other registered kind gets its declared examples."""


def _example_kind_cases() -> list[Json]:
    from queries.registry import KINDS

    return [_kind_case(k.name, e.params, e.rows) for k in KINDS if k.name not in _HAND_WRITTEN_ENCODINGS
            for e in k.examples]


def _kind_vector(case: Json, seed: bytes) -> tuple[np.ndarray, bool]:
    """The kind's vector for the case and whether `contribute` drew from its generator at all (a vector that two
    seeds happen to agree on still depends on the generator when it drew: a port with another generator may differ)."""
    rng = contribution_generator(SeededRandom(seed))
    before = rng.bit_generator.state
    kind = get_kind(case["kind"])
    vec = np.asarray(kind.contribute(kind.parse_task(case["task"]), case["rows"], rng), dtype=np.int64)
    return vec, rng.bit_generator.state != before


@topic(
    "kind_encodings",
    "Each query kind's device encoding (`contribute(task, rows, rng)`) of given rows, before noise and masking. "
    "`rng` is queries.kind.contribution_generator(SeededRandom(seed)) (numpy PCG64); `uses_rng` says whether the vector depends on it "
    "(stochastic rounding, local SGD, a sample of the rows: contribute drew from it) — a port reproduces those vectors only with the same generator, and checks "
    "the deterministic ones byte for byte. `statement`: the canonical bytes (secagg.validity.Statement.encode) of the "
    "validity statement the kind derives from the task (what the device proves; null: none).",
    [
        _kind_case("histogram", {"buckets": ["moon", "sun", "star"]}, ["moon", "sun", "moon", "comet"]),
        _kind_case("histogram", {"buckets": ["a", "b", "c", "d"], "max_contributions_per_device": 2,
                                 "other_bucket": "other"}, ["d", "zzz", "a", "a"]),
        _kind_case("histogram", {"buckets": ["x", "y"]}, []),
        _kind_case("feature_stats", {"features": [{"name": "age", "lower": 18, "upper": 90},
                                                  {"name": "income", "lower": 0, "upper": 2e5}]},
                   [{"age": 31.0, "income": 52000.0}, {"age": 64.0}, {"age": 200.0, "income": -5.0}]),
        _kind_case("feature_stats", {"features": [{"name": "age", "lower": 18, "upper": 90},
                                                  {"name": "income", "lower": 0, "upper": 2e5}],
                                     "max_examples_per_device": 3},
                   [{"age": 31.0, "income": 52000.0}, {"age": 64.0}, {"age": 200.0, "income": -5.0}]),
        _feature_stats_count_bin_case(),
        _kind_case("feature_stats", {"features": [{"name": "age", "lower": 18, "upper": 90},
                                                  {"name": "income", "lower": 0, "upper": 2e5}],
                                     "max_examples_per_device": 3, "clip_at": 0.99},
                   [{"age": 31.0, "income": 52000.0}, {"age": 64.0}, {"age": 200.0, "income": -5.0}]),
        _kind_case("heavy_hitters", {"mode": "secagg", "max_length": 4, "alphabet": "abcdefghijklmnopqrstuvwxyz"},
                   ["hello"]),
        _kind_case("heavy_hitters", {"mode": "triehh", "max_length": 3, "alphabet": "abc", "theta": 2,
                                     "sample_rate": 0.5}, ["abc", "cab"]),
        _kind_case("training", {"model": {"name": "logistic", "n_features": 3}, "rounds": 1, "eval_every": 0,
                                "holdout_fraction": 0.0},
                   [{"x": [0.1, -0.2, 0.3], "y": 1}, {"x": [0.0, 0.5, -0.1], "y": 0}]),
        _kind_case("histogram", {"buckets": ["3", "0.5", "1e-05", "true", "100000000000000000000"],
                                 "max_contributions_per_device": 5},
                   [3, 3.0, 0.5, 1e-05, True, {"value": 0.5}, 1e20, None, [1]]),
        _kind_case("heavy_hitters", {"mode": "secagg", "max_length": 8, "alphabet": "abcdefghijklmnopqrstuvwxyzσοδ",
                                     "max_words_per_device": 3},
                   ["Straße", "STRASSE", "strasse", "\u3000ﬁsh\u2003", "ΟΔΟΣ", "ΟΔΟΣ", "ΟΔΟΣ", "toolongword", "x1"]),
        _kind_case("training", frecency_params(eval_every=0), frecency_rows()),
        _kind_case("training", frecency_params(eval_every=2), frecency_rows()),
        *_example_kind_cases(),
    ],
)
def kind_encodings_vectors(case: Json) -> Json:
    vec, drew = _kind_vector(case, unh(case["seed"]))
    other, _ = _kind_vector(case, unh(case["seed"]) + b"/other")
    kind = get_kind(case["kind"])
    statement = kind.validity(kind.parse_task(case["task"]))
    return {"vector": big(vec), "dim": int(vec.shape[0]), "uses_rng": bool(drew or not np.array_equal(vec, other)),
            "statement": None if statement is None else statement.encode().hex()}


def _typed_kinds() -> list[str]:
    """The kinds that declare their own round task model (the others take any JSON object)."""
    from queries.kind import UntypedTask
    from queries.registry import KINDS

    return [k.name for k in KINDS if k.Task is not UntypedTask]


@topic(
    "task_schemas",
    "The JSON Schema (draft 2020-12, as pydantic writes it) of each query kind's round task (`Kind.Task`, "
    "queries/kind.py): the one set of task parsing rules, which the TypeScript SDK applies too.",
    [{"kind": name} for name in _typed_kinds()],
)
def task_schemas_vectors(case: Json) -> Json:
    return {"schema": get_kind(case["kind"]).task_schema()}


def _task_cases() -> list[Json]:
    """Per typed kind: its first planned task (accepted), the tasks of its other stages (`_LATER_TASKS`, accepted),
    and each of them spoiled one way each (refused; a key left out that has a default is not a case)."""
    out: list[Json] = []
    for name in _typed_kinds():
        good = _round0_plan(name, _EXAMPLE_PARAMS.get(name) or get_kind(name).examples[0].params).task
        goods = [good] + [t for t in (f() for f in _LATER_TASKS.get(name, ())) if t != good]
        out += [{"kind": name, "task": task} for task in goods]
        for task in goods:
            out += [{"kind": name, "task": spoil} for spoil in _spoilers(task) if not _has_default(name, task, spoil)]
    return out


def _has_default(kind: str, task: Json, spoil: Json) -> bool:
    """Whether `spoil` only leaves out a key that has a default (accepted, but not the planned task's wire form)."""
    from queries.kind import QueryKindError

    if not set(spoil) < set(task):
        return False
    try:
        get_kind(kind).parse_task(spoil)
    except QueryKindError:
        return False
    return True


_EXAMPLE_PARAMS: dict[str, Json] = {  # params whose task has more to spoil than the kind's first example
    "histogram": {"buckets": ["moon", "sun", "star"], "max_contributions_per_device": 2},
    "heavy_hitters": {"mode": "secagg", "max_length": 4, "alphabet": "abc", "max_words_per_device": 2},
    "feature_stats": {"features": [{"name": "age", "lower": 18, "upper": 90}, {"name": "income", "lower": 0, "upper": 2e5}],
                      "max_examples_per_device": 3, "bins": 4},
}


def _feature_stats_row_counts() -> Json:
    """The row-count round of a feature_stats query that leaves the bound to the data."""
    task: Json = _round0_plan("feature_stats", {"features": [{"name": "age", "lower": 18, "upper": 90}],
                                                "max_examples_limit": 20}).task
    return task


def _feature_stats_second_moments() -> Json:
    """The second-moments round once the means are known (one of them suppressed)."""
    from queries.feature_stats import FeatureStatsState

    k = get_kind("feature_stats")
    p = k.parse_params(_EXAMPLE_PARAMS["feature_stats"])
    plan = k.plan_round(p, FeatureStatsState(bound=3, stage=1, means=[41.5, None]), 1)
    assert plan is not None
    return plan.task


def _feature_stats_clip() -> Json:
    """The clip round of a feature_stats query with `clip_at` (per-feature hierarchical histograms)."""
    task: Json = _round0_plan("feature_stats", {"features": [{"name": "age", "lower": 18, "upper": 90}],
                                                "max_examples_per_device": 2, "clip_at": 0.99}).task
    return task


def _training_round0(params: Json) -> Callable[[], Json]:
    """The first task of a training query with `params` (its phase and options chosen by the params)."""
    return lambda: _round0_plan("training", {"rounds": 2, "eval_every": 0, **params}).task


_LATER_TASKS: dict[str, tuple[Callable[[], Json], ...]] = {  # accepted tasks of the stages round 0 does not show
    "feature_stats": (_feature_stats_row_counts, _feature_stats_second_moments, _feature_stats_clip),
    "training": (
        _training_round0({"model": {"name": "softmax", "n_features": 2, "n_classes": 3}, "class_weighting": True}),
        _training_round0({"model": {"name": "logistic", "n_features": 2}, "eval_every": 1}),
        _training_round0({"model": {"name": "logistic", "n_features": 2}, "adaptive_clipping": {}, "features": ["a", "b"],
                          "scaling": {"a": {"mean": 1.5, "std": 2.0}, "b": {"mean": 0.0, "std": 0.0}}}),
        _training_round0({"model": {"name": "logistic", "n_features": 2}, "server_optimizer": {"name": "rprop"}}),
    ),
}

_TAGS = ("stage", "phase")
"""Fields that tag a task's variant (a union tagged by that field): spoiled with an unknown value."""
_OVERSIZE = 1001
"""An oversize list (above MAX_FEATURES) for a list of nullable numbers: small enough for the file."""


def _spoilers(task: Json) -> list[Json]:
    """The task with an unknown key, each key missing, an unknown tag, each integer field as True, 3.7 and "3",
    each list of strings empty, with an empty string or with a number, and each list of nullable numbers oversize
    (other sizes above the limits: the schema's maxItems/maxLength, kept out of the file)."""
    out: list[Json] = [task | {"unexpected": 1}]
    out += [{k: v for k, v in task.items() if k != key} for key in task]
    out += [task | {key: "nope"} for key in _TAGS if key in task]
    for key, value in task.items():
        if isinstance(value, int) and not isinstance(value, bool):
            out += [task | {key: True}, task | {key: 3.7}, task | {key: "3"}]
        if isinstance(value, list) and value and isinstance(value[0], str):
            out += [task | {key: []}, task | {key: value + [""]}, task | {key: value + [1]}]
        if isinstance(value, list) and value and any(v is None for v in value):
            out += [task | {key: [None] * _OVERSIZE}]
    return out


def _rule_cases() -> list[Json]:
    """One refused task per rule across fields (each `model_validator` of the kinds' task models, by its qualified name
    in `rule`): tasks the JSON Schema accepts and only those rules refuse, so a port that checks the schema alone fails
    them. `tests/test_vectors.py` checks that every such validator has a case."""
    hh = _round0_plan("heavy_hitters", _EXAMPLE_PARAMS["heavy_hitters"]).task
    first = _round0_plan("feature_stats", _EXAMPLE_PARAMS["feature_stats"]).task
    second, clip = _feature_stats_second_moments(), _feature_stats_clip()
    qt = _round0_plan("quantiles", get_kind("quantiles").examples[0].params).task
    train = _LATER_TASKS["training"][2]()  # a train round with a scaler and the norm histogram
    wide = {"name": "x", "lower": -1.7e308, "upper": 1.7e308}  # lower < upper, but upper − lower overflows
    backwards = {"name": "x", "lower": 90.0, "upper": 18.0}
    tree = {"branching": 4, "levels": 8}  # 4^8 = 65,536 leaves (the most), 87,383 entries per feature
    rules: list[tuple[str, str, Json]] = [
        ("HeavyHittersTask._consistent: the alphabet's characters are distinct", "heavy_hitters", hh | {"alphabet": "aba"}),
        ("HeavyHittersTask._consistent: depth < max_length", "heavy_hitters",
         hh | {"depth": 4, "frontier": ["abca"], "max_length": 4}),
        ("HeavyHittersTask._consistent: every prefix has length depth", "heavy_hitters", hh | {"depth": 1, "frontier": ["a", "bc"]}),
        ("HeavyHittersTask._consistent: the prefixes are distinct", "heavy_hitters", hh | {"depth": 1, "frontier": ["a", "a"]}),
        ("RowCountsTask._increasing: the grid increases", "feature_stats", _feature_stats_row_counts() | {"grid": [1, 3, 3]}),
        ("FeatureSpec._ordered: lower < upper", "feature_stats", first | {"features": [first["features"][0], backwards]}),
        ("FeatureSpec._ordered: upper − lower is finite", "feature_stats", second | {"features": [second["features"][0], wide]}),
        ("SecondMomentsTask._per_feature: one mean per feature", "feature_stats", second | {"means": [41.5]}),
        ("SecondMomentsTask._per_feature: one second scale per feature", "feature_stats",
         second | {"second_scales": [*second["second_scales"], None]}),
        ("ClipQuantilesTask._fits: at most 65,536 leaves", "feature_stats", clip | {"branching": 4, "levels": 9}),
        ("ClipQuantilesTask._fits: at most 2^19 entries", "feature_stats", clip | tree | {"features": [clip["features"][0]] * 7}),
        ("QuantileFeature._ordered: lower < upper", "quantiles", qt | {"features": [backwards]}),
        ("QuantileFeature._ordered: upper − lower is finite", "quantiles", qt | {"features": [qt["features"][0], wide]}),
        ("QuantilesTask._fits: at most 65,536 leaves", "quantiles", qt | {"branching": 64, "levels": 3}),
        ("QuantilesTask._fits: at most 2^19 entries", "quantiles", qt | tree | {"features": [qt["features"][0]] * 7}),
        ("Scaler._per_feature: one mean_ per feature", "training", train | {"scaling": train["scaling"] | {"mean_": [1.5]}}),
        ("Scaler._per_feature: one scale_ per feature", "training",
         train | {"scaling": train["scaling"] | {"scale_": [2.0, 1.0, 1.0]}}),
        ("TrainTask._clip_entries: 0, 1 or the norm histogram's entries", "training", train | {"clip_entries": 2}),
    ]
    return [{"kind": kind, "task": task, "rule": rule} for rule, kind, task in rules]


@topic(
    "task_parsing",
    "Round tasks each kind must accept or refuse (`parse_task`): `accepted`, and for a refused task the field "
    "named (`task.<key>`, the first key of the error). A port must agree on `accepted` for every case. Cases with "
    "a `rule` (the validator's qualified name, then what it requires) are refused by one rule across fields that "
    "the JSON Schema (task_schemas) cannot state: a port checks those rules by hand, and these cases show it does.",
    _task_cases() + _rule_cases(),
)
def task_parsing_vectors(case: Json) -> Json:
    from queries.kind import QueryKindError

    try:
        get_kind(case["kind"]).parse_task(case["task"])
    except QueryKindError as exc:
        return {"accepted": False, "field": str(exc).split(":", 1)[0].split(".")[1]}
    return {"accepted": True, "field": None}


@topic(
    "request_signing",
    "Device request signing (queries/envelope.py): the signed payload, its Ed25519 signature under a fixed "
    "key, the device id and the headers as sent.",
    [
        {"private_key": h(bytes(range(32))), "method": "POST", "path_qs": "/v1/device/register",
         "timestamp": "1700000000", "nonce": "AAECAwQFBgcICQoLDA0ODw", "body": h(json.dumps({"public_key": base64.b64encode(
             crypto.ed25519_public_bytes(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))).decode()}).encode())},
        {"private_key": h(SeededRandom(b"signing/key").bytes(32)), "method": "get",
         "path_qs": "/v1/device/cohorts/00ff/phases/2/next?wait=10.0", "timestamp": "1712345678",
         "nonce": "n0nce-with_all-chars09", "body": ""},
        {"private_key": h(SeededRandom(b"signing/key").bytes(32)), "method": "POST",
         "path_qs": "/v1/device/cohorts/00ff/phases/2", "timestamp": "1712345679",
         "nonce": "x" * 64, "body": h(bytes(range(256)))},
    ],
)
def request_signing_vectors(case: Json) -> Json:
    key = Ed25519PrivateKey.from_private_bytes(unh(case["private_key"]))
    public = crypto.ed25519_public_bytes(key)
    payload = signing_payload(case["method"], case["path_qs"], case["timestamp"], case["nonce"], unh(case["body"]))
    sig = key.sign(payload)
    return {
        "public_key": h(public),
        "public_key_base64": base64.b64encode(public).decode(),
        "device_id": device_id_for(public),
        "payload": h(payload),
        "payload_text": payload.decode("utf-8"),
        "signature": h(sig),
        "headers": {HDR_PROTOCOL: str(PROTOCOL_VERSION), HDR_TIMESTAMP: case["timestamp"], HDR_NONCE: case["nonce"], HDR_SIGNATURE: base64.b64encode(sig).decode()},
    }


def _validity_context(round_: int, party: int, label: str) -> Json:
    return {"session_id": SID, "query_id": "q-vectors", "round": round_, "party": party,
            "task_digest": h(hashlib.sha256(b"validity/task/" + label.encode()).digest())}


@topic(
    "validity",
    "Validity proofs (secagg/validity, docs/validation.md): the generators (G_i = from_uniform(SHA-512(domain ‖ "
    "'G' ‖ i as u64 BE)[:32]); the bit-vector proof's g_k, h_k with 'g', 'h' and its polynomial generator g_t = "
    "from_uniform(SHA-512(domain ‖ 't')[:32]); the base point B), the context (session id, query id, round, party, "
    "task digest) and statement bytes of the transcript (relations: [[[index, coef], …], low, high]), the statement's "
    "bit layout (per bit its entry, −1 for slack bits, and coefficient; per entry its offset; per constraint its "
    "[[bit, weight], …] and right-hand side) and the witness bits, and for a seeded prover (SeededRandom(seed): ρ, α, "
    "ρ_S, σ, sL, sR, τ1, τ2 each by `randbelow(ℓ − 1) + 1`, in that order) the proof bytes, its commitment "
    "K = Σ (s·x_i + e_i)·G_i + ρ·B, ρ and its 16-bit limbs. Scalars are 32 bytes little-endian.",
    [
        {"statement": {"segments": [["bits", 4, 1]]}, "values": [0, 0, 1, 0], "noise": None,
         "context": _validity_context(0, 3, "0"), "seed": h(b"validity/0")},
        {"statement": {"segments": [["bits", 3, 1]]}, "values": [0, 0, 0], "noise": None,
         "context": _validity_context(2, 1, "1"), "seed": h(b"validity/1")},
        {"statement": {"segments": [["bits", 4, 2], ["signs", 2]]}, "values": [1, 0, 1, 0, -1, 1], "noise": None,
         "context": _validity_context(0, 7, "2"), "seed": h(b"validity/2")},
        {"statement": {"segments": [["ranged", 2, -3, 10]], "encoding_scale": 4, "noise_bound": 5},
         "values": [-3, 10], "noise": [5, -5],
         "context": _validity_context(1, 2, "3"), "seed": h(b"validity/3")},
        {"statement": {"segments": [["bits", 2, 1], ["ranged", 2, 0, 9], ["ranged", 3, -2, 6]], "encoding_scale": 2,
                       "noise_bound": 3,
                       "relations": [[[[2, 1], [3, -1]], 0, 9], [[[4, 1], [5, 1], [6, 2]], -1, 12], [[[3, 3]], 6, 27]]},
         "values": [0, 1, 7, 4, -2, 5, 3], "noise": [3, -3, 0, 1, 2, -1, 0],
         "context": _validity_context(3, 5, "4"), "seed": h(b"validity/4")},
    ],
)
def validity_vectors(case: Json) -> Json:
    statement = validity.Statement.from_json(case["statement"])
    c = case["context"]
    ctx = validity.ProofContext(unh(c["session_id"]), c["query_id"], c["round"], c["party"], unh(c["task_digest"]))
    proof, blind = validity.prove(statement, ctx, case["values"], case["noise"], SeededRandom(unh(case["seed"])))
    k = validity.verify(statement, ctx, proof)
    assert k == validity.commitment_of(statement, case["values"], case["noise"], blind)
    lay = vlayout.layout(statement)
    gv, hv = vgroup.bit_generators(lay.n)
    return {
        "generators": [h(vgroup.generator(i)) for i in range(statement.dim)],
        "bit_generators": [h(p) for p in gv],
        "complement_generators": [h(p) for p in hv],
        "inner_product_generator": h(vgroup.inner_product_generator()),
        "layout": {"entry": list(lay.entry), "coef": [str(c) for c in lay.coef], "offsets": [str(o) for o in lay.offsets],
                   "constraints": [[[[k, str(w)] for k, w in terms], str(v)] for terms, v in lay.constraints]},
        "witness": vlayout.witness(statement, case["values"], case["noise"]),
        "base_point": h(vgroup.mul_base(1)),
        "transcript_domain": vtranscript.DOMAIN.decode(),
        "context_bytes": h(ctx.encode()),
        "statement_bytes": h(statement.encode()),
        "proof_size": validity.proof_size(statement),
        "proof": h(proof),
        "commitment": h(k),
        "blind": str(blind),
        "blind_limbs": validity.blind_limbs(blind),
    }


# -- task binding (protocol 2) ---------------------------------------------------------------------------


_NOISE_BLOCKS = {
    "skellam": {"mechanism": "skellam", "scale": 8.0, "std": 2.8284271247461903, "encoding_scale": 1},
    "discrete_gaussian": {"mechanism": "discrete_gaussian", "scale": 2.5, "std": 2.5, "encoding_scale": 4},
}


def _example_assignment(path: Path) -> Json:
    """The wire assignment (the JSON object a device receives, `Assignment.model_dump(mode="json", exclude_none=True)`)
    of party 1 in round 0 of the example spec at `path`, with fixed cohort, secagg, privacy and noise blocks."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    spec = QuerySpec.model_validate(raw).model_dump(mode="json")  # as the server stores and sends it
    plan = _round0_plan(spec["kind"], spec["params"])
    n = spec["cohort"]["min_clients"]
    sid = hashlib.sha256(b"task_digest/session/" + path.stem.encode()).digest()[:16]
    bits = min(62, max(16, (n * plan.max_abs).bit_length() + 1))
    cfg = SecAggConfig(sid, n, plan.dim, bits, threat_model="active", min_survivors=(2 * n) // 3)
    mechanism = spec["privacy"]["mechanism"]
    rounds = int(spec["params"].get("rounds", 1)) if spec["kind"] == "training" else 1
    privacy = AssignmentPrivacy(
        mechanism=mechanism, epsilon=spec["privacy"].get("epsilon"), delta=spec["privacy"].get("delta"), rounds=rounds,
        l1_sensitivity=float(plan.l1_sensitivity), l2_sensitivity=float(plan.l2_sensitivity),
        weight=float(plan.privacy_weight),
    )
    assignment = Assignment(
        query_id="q-vectors", round=0, cohort_id=sid.hex(), party_id=1, kind=spec["kind"], source=spec["source"],
        task=plan.task, secagg=cfg.to_dict(), threat_model=cfg.threat_model, first_phase=0,
        phase_timeout_s=spec["cohort"]["phase_timeout_s"],
        noise=NoiseBlock.model_validate(_NOISE_BLOCKS[mechanism]) if mechanism in _NOISE_BLOCKS else None,
        privacy=privacy, spec=spec,
    )
    return assignment.model_dump(mode="json", exclude_none=True)


_EDGE_ASSIGNMENTS: list[Json] = [
    {"name": "floats in ECMAScript's shortest form", "assignment": {
        "query_id": "q-edge", "round": 0, "kind": "feature_stats",
        "task": {"values": [1e-7, 1e-6, 0.1, 0.30000000000000004, 31.0, -0.0, 0.0, -1.5, 5e-324, 2.2250738585072014e-308,
                            123456789.125, 9007199254740991, -9007199254740991, 9007199254740991.0, 4.35,
                            333333333.3333333, 1e-300, 1.5e-10, 2e-7, 123e-20]},
    }},
    {"name": "integral doubles beyond 2^53 written as floats (read as binary64, not as integers)", "assignment": {
        "query_id": "q-edge", "round": 0,
        "task": {"values": [1e21, 1e20, 9007199254740992.0, -1e22, 1.5e300, 1.7976931348623157e308, 1e16 + 2.0]},
    }},
    {"name": "strings: non-BMP, control characters, escapes", "assignment": {
        "query_id": "q-édge ☕ 😀 𝄞", "round": 1, "kind": "heavy_hitters", "source": "words\u0000\u0001\u001f\u007f\u0080",
        "task": {"alphabet": "abcσοδ", "quote": "\"back\\slash/solidus\"", "ws": "\t\n\r\b\f \u2028\u2029\u00a0",
                 "astral": "\U0001F600\U0010FFFF\U00010000", "bom": "\ufeffx", "private_use": "\ue000\uffff"},
    }},
    {"name": "member order: UTF-16 code units, nested objects and arrays", "assignment": {
        "task": {"b": 1, "a": {"z": [{"y": 1, "x": 2}, [], {}], "é": 1, "\ue000": 2, "\U0001F600": 3, "A": 4, "10": 5,
                               "9": 6, "": 7, "aa": 8, "a\u0000": 9}, "A": [3, 2, 1]},
        "round": 2, "query_id": "q-edge", "kind": "histogram",
    }},
    {"name": "null members dropped at the top level only; per-device and unknown members left out", "assignment": {
        "query_id": "q-edge", "round": 0, "cohort_id": "00112233445566778899aabbccddeeff", "party_id": 17,
        "kind": "histogram", "source": "words", "task": {"buckets": ["a", "b"], "other_bucket": None},
        "secagg": {"session_id": "00112233445566778899aabbccddeeff", "n": 3, "dim": 2, "bits": 16, "graph": "auto",
                   "threat_model": "semi_honest", "threshold": None, "min_survivors": None, "degree": None,
                   "max_input": None},
        "threat_model": "semi_honest", "first_phase": 0, "phase_timeout_s": 30.0,
        "noise": None, "validation": None, "privacy": None, "spec": None,
        "peer_identity_keys": {"1": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}, "server_url": "https://x.example",
        "future_member": {"ignored": True},
    }},
    {"name": "no member the digest covers", "assignment": {"party_id": 1, "noise": None}},
]


@topic(
    "task_digest",
    "The task digest (queries/task_digest.py): the assignment's members named in DIGEST_FIELDS whose value is "
    "present and not null, as RFC 8785 canonical JSON ('canonical', UTF-8 text), and SHA-256('fa-task-digest/v1\\n' ‖ "
    "canonical) ('digest'). Cases: each example spec's round-0 wire assignment, then hand-made edge cases.",
    [
        *({"name": f"examples/{p.name}", "assignment": _example_assignment(p)}
          for p in sorted((ROOT / "examples").glob("*.json"))),
        *_EDGE_ASSIGNMENTS,
    ],
)
def task_digest_vectors(case: Json) -> Json:
    canonical = canonical_json(td.digest_view(case["assignment"]), "assignment")
    digest = td.task_digest(case["assignment"])
    assert digest == hashlib.sha256(td.DOMAIN + canonical).digest()
    return {"canonical": canonical.decode("utf-8"), "digest": h(digest)}


def _signed_case(label: str, party: int, members: list[int], n: int, digest: bytes | None = None) -> Json:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    def pk(name: str) -> str:
        sk = X25519PrivateKey.from_private_bytes(SeededRandom(f"signed/{label}/{name}".encode()).bytes(32))
        return h(crypto.x25519_public_of(crypto.x25519_private_bytes(sk)))

    return {
        "identity_private": h(SeededRandom(f"signed/{label}/identity".encode()).bytes(32)),
        "session_id": h(SeededRandom(f"signed/{label}/session".encode()).bytes(16)),
        "task_digest": h(hashlib.sha256(f"signed/{label}/task".encode()).digest() if digest is None else digest),
        "members_root": _root(f"signed/{label}"),
        "party": party,
        "c_pk": pk("c"),
        "s_pk": pk("s"),
        "survivors": {"n": n, "members": members},
    }


@topic(
    "signed_payloads",
    "What a party signs with its Ed25519 identity key (`identity_private` is its RFC 8032 32-byte seed): the keys payload "
    "DOMAIN ‖ 'keys/' ‖ c_pk ‖ s_pk (sent with AdvertiseKeys or the check-in, relayed in PeerKeys), the advertise payload "
    "DOMAIN ‖ 'advertise/' ‖ round binding (session ‖ task digest ‖ members root) ‖ party (u32 BE) ‖ c_pk ‖ s_pk (sent "
    "in ShareKeys, relayed in member entries) and the consistency payload DOMAIN ‖ 'consistency/' ‖ "
    "round binding ‖ survivor bitmap (active model), with their deterministic signatures.",
    [
        _signed_case("1", 1, [1, 2, 3], 3),
        _signed_case("2", 513, [1, 2, 4, 9, 10, 513], 1000),
        _signed_case("3", 7, [1, 2, 3, 4, 5, 6, 7, 8, 9], 9, crypto.NO_TASK),
    ],
)
def signed_payloads_vectors(case: Json) -> Json:
    key = Ed25519PrivateKey.from_private_bytes(unh(case["identity_private"]))
    public = crypto.ed25519_public_bytes(key)
    bind = crypto.binding(unh(case["session_id"]), unh(case["task_digest"]))
    rbind = crypto.round_binding(bind, unh(case["members_root"]))
    advertise = crypto.advertise_payload(rbind, case["party"], unh(case["c_pk"]), unh(case["s_pk"]))
    bitmap = _bitmap(case["survivors"])
    consistency = crypto.consistency_payload(rbind, bitmap)
    keys = crypto.keys_payload(unh(case["c_pk"]), unh(case["s_pk"]))
    out = {
        "public_key": h(public),
        "keys_payload": h(keys),
        "keys_signature": h(crypto.sign(key, keys)),
        "binding": h(bind),
        "round_binding": h(rbind),
        "advertise_payload": h(advertise),
        "advertise_signature": h(crypto.sign(key, advertise)),
        "survivors_bitmap": h(bitmap),
        "consistency_payload": h(consistency),
        "consistency_signature": h(crypto.sign(key, consistency)),
    }
    crypto.verify(public, unh(out["keys_signature"]), keys, "keys")
    crypto.verify(public, unh(out["advertise_signature"]), advertise, "advertise")
    crypto.verify(public, unh(out["consistency_signature"]), consistency, "consistency")
    return out


def _members_case(label: str, n: int, degree: int, parties: list[int], absent: tuple[int, ...] = (),
                  identities: bool = True, alter: int | None = None) -> Json:
    """A `members` case: n parties with X25519 keys (and Ed25519 identities, or the 32 zero bytes of a session without
    identities) drawn from SeededRandom(`members/<label>/…`); `absent` parties did not advertise; `alter`: that party's
    c_pk is drawn from another label (one entry changed: another root, another graph)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    def public(name: str) -> str:
        sk = X25519PrivateKey.from_private_bytes(SeededRandom(f"members/{label}/{name}".encode()).bytes(32))
        return h(crypto.x25519_public_of(crypto.x25519_private_bytes(sk)))

    entries = []
    for q in range(1, n + 1):
        if q in absent:
            continue
        identity = h(crypto.ed25519_public_bytes(Ed25519PrivateKey.from_private_bytes(
            SeededRandom(f"members/{label.split(':')[0]}/identity/{q}".encode()).bytes(32)))) if identities else h(bytes(32))
        c_pk = public(f"c/{q}") if q != alter else public(f"c/{q}/altered")
        entries.append({"party": q, "identity": identity, "c_pk": c_pk, "s_pk": public(f"s/{q}")})
    return {
        "name": label,
        "session_id": h(SeededRandom(f"members/{label.split(':')[0]}/session".encode()).bytes(16)),
        "task_digest": h(hashlib.sha256(f"members/{label.split(':')[0]}/task".encode()).digest()),
        "n": n,
        "entries": entries,
        "degree": degree,
        "parties": parties,
    }


@topic(
    "members",
    "The members list (device protocol 3): when phase 0 closes the server fixes one 16-byte leaf per party 1..n — "
    "SHA-256(DOMAIN ‖ 'member/' ‖ party (u32 BE) ‖ identity key (32 bytes; 32 zero bytes in sessions without identities) "
    "‖ c_pk ‖ s_pk) truncated to 16 bytes, or 16 zero bytes for a party that did not advertise — and the members root "
    "SHA-256(DOMAIN ‖ 'members/' ‖ n (u32 BE) ‖ the n leaves). The root seeds the neighbour graph (graph_seed = "
    "HKDF-SHA256(key = root, info = DOMAIN ‖ 'graph/' ‖ binding), binding = session id ‖ task digest; ring and "
    "neighbourhoods as in `neighbour_graph`, at the case's degree, n − 1 being the complete graph) and ends every later "
    "binding (round binding = binding ‖ root). `leaf_inputs`: the hashed bytes of the leaves of `parties`.",
    [
        _members_case("three", 3, 2, [1, 2, 3]),
        _members_case("twelve", 12, 4, [1, 2, 5, 12], absent=(5, 9)),
        _members_case("twelve:altered", 12, 4, [1, 2, 5, 12], absent=(5, 9), alter=7),
        _members_case("unsigned", 120, 42, [1, 7, 60, 120], absent=(7,), identities=False),
        _members_case("none", 4, 3, [1, 4], absent=(1, 2, 3, 4)),
    ],
)
def members_vectors(case: Json) -> Json:
    n = case["n"]
    leaves = [crypto.ABSENT_LEAF] * n
    inputs: dict[str, str] = {}
    for e in case["entries"]:
        q, identity, c_pk, s_pk = e["party"], unh(e["identity"]), unh(e["c_pk"]), unh(e["s_pk"])
        assert leaves[q - 1] == crypto.ABSENT_LEAF, "one entry per party"
        leaves[q - 1] = crypto.member_leaf(q, identity, c_pk, s_pk)
        preimage = crypto.DOMAIN + b"member/" + struct.pack(">I", q) + identity + c_pk + s_pk
        assert hashlib.sha256(preimage).digest()[: crypto.MEMBER_LEAF_BYTES] == leaves[q - 1]
        if q in case["parties"]:
            inputs[str(q)] = h(preimage)
    joined = b"".join(leaves)
    root = crypto.members_root(joined)
    assert root == hashlib.sha256(crypto.DOMAIN + b"members/" + struct.pack(">I", n) + joined).digest()
    bind = crypto.binding(unh(case["session_id"]), unh(case["task_digest"]))
    seed = crypto.graph_seed(bind, root)
    graph = NeighbourGraph(n, case["degree"], seed)
    return {
        "leaves": [h(leaf) for leaf in leaves],
        "leaf_inputs": inputs,
        "members_root": h(root),
        "binding": h(bind),
        "graph_seed": h(seed),
        "closed_neighbourhoods": {str(q): list(graph.closed(q)) for q in case["parties"]},
        "round_binding": h(crypto.round_binding(bind, root)),
    }


_TIE = 1e-9
"""The least distance (in log2 units, or from an integer for the degree's ceiling) a `safety_floor` case keeps from
every decision the floor takes with a logarithm: JavaScript's Math.log2 / Math.log need not round as CPython's libm
does, so a case this far from a tie gives the same verdicts on both."""


def _clear_of_ties(n: int, degree: int, a: Any) -> None:
    """Refuse a `safety_floor` case that sits within `_TIE` of a logarithmic decision: the threshold floor at the given
    degree, at the safety floor's and at every degree `plan` visits (t and t − 1 against the budget), the live threshold
    at those degrees, the ceiling that gives the safety floor's degree and the connectivity test at the given degree."""
    def threshold_ties(k: int) -> None:
        if k >= n - 1:
            return
        m, p = k + 1, min(1.0, floor.corrupt_count(n, a) / (n - 1))
        t = floor.threshold_floor(n, k, a)
        assert t is not None  # a sparse graph always has one (t = m)
        budget = -a.bits - math.log2(n)
        for s in (2 * t - m, 2 * (t - 1) - m):
            value = floor.log2_tail(k, s, p)
            if math.isfinite(value) and value != 0.0:
                assert abs(value - budget) > _TIE, ("threshold", n, k, s)

    def live_ties(k: int, dropout: float) -> None:
        if k >= n - 1:
            return
        m, budget = k + 1, -floor.CORRECTNESS_BITS - math.log2(n)
        t = floor.live_threshold(n, k, dropout)
        for s in (m - t + 1, m - t):
            value = floor.log2_tail(k, s, dropout)
            if 1 <= s and math.isfinite(value) and value != 0.0:
                assert abs(value - budget) > _TIE, ("live", n, k, s)

    bad = a.corrupt_fraction + a.dropout_fraction
    if bad > 0:
        ratio = (a.bits + math.log2(n)) / -math.log2(bad)
        assert abs(ratio - round(ratio)) > _TIE, ("ceiling", n, ratio)
        if degree < n - 1:
            assert abs(math.log2(n) + (degree // 2) * math.log2(bad) + a.bits) > _TIE, ("connected", n, degree)
    f = floor.safety_floor(n, a)
    threshold_ties(degree)
    threshold_ties(f.degree)
    plan = floor.plan(n, a.dropout_fraction, a)
    for k in range(f.degree, min(plan.degree, n - 2) + 1, 2):
        threshold_ties(k)
        live_ties(k, a.dropout_fraction)


def _floor_case(n: int, degree: int, threshold: int, gamma: float = floor.DEFAULT_CORRUPT_FRACTION,
                delta: float = floor.DEFAULT_DROPOUT_FRACTION, security: int = floor.SECURITY_BITS,
                grinding: int = floor.GRINDING_BITS, untrusted: int = 0) -> Json:
    return {"n": n, "degree": degree, "threshold": threshold, "corrupt_fraction": gamma, "dropout_fraction": delta,
            "security_bits": security, "grinding_bits": grinding, "untrusted": untrusted}


def _floor_cases() -> list[Json]:
    """Complete graphs n = 2..100 at and one below the exact threshold for γ ∈ {0.05, 0.2, 1/3, 0.45}; sparse cohorts of
    200, 1,000 and 10,000 for those γ and δ ∈ {0, 0.05, 0.15}: at the floor, one below its threshold, two below its
    degree (with the threshold it would need), the plan's own config; then degree 2, untrusted neighbours at and one
    below 2t − m, other bit budgets."""
    gammas = (0.05, 0.2, 1 / 3, 0.45)
    cases: list[Json] = []
    for gamma in gammas:
        a = floor.Assumptions(gamma, floor.DEFAULT_DROPOUT_FRACTION)
        for n in range(2, 101):
            t = floor.threshold_floor(n, n - 1, a)
            assert t is not None
            cases += [_floor_case(n, n - 1, t, gamma), _floor_case(n, n - 1, t - 1, gamma)]
    for n in (200, 1000, 10_000):
        for gamma in gammas:
            for delta in (0.0, 0.05, 0.15):
                a = floor.Assumptions(gamma, delta)
                f = floor.safety_floor(n, a)
                plan = floor.plan(n, delta, a)
                cases += [_floor_case(n, f.degree, f.threshold, gamma, delta),
                          _floor_case(n, f.degree, f.threshold - 1, gamma, delta),
                          _floor_case(n, plan.degree, plan.threshold, gamma, delta)]
                if not f.complete:
                    lower = f.degree - 2
                    cases.append(_floor_case(n, lower, floor.threshold_floor(n, lower, a) or lower + 1, gamma, delta))
    default = floor.safety_floor(1000)
    need = 2 * default.threshold - (default.degree + 1)
    cases += [
        _floor_case(1000, 2, 3),
        _floor_case(1000, default.degree, default.threshold, untrusted=need - 1),
        _floor_case(1000, default.degree, default.threshold, untrusted=need),
        _floor_case(21, 20, 15, untrusted=8),
        _floor_case(21, 20, 15, untrusted=9),
        _floor_case(21, 20, 16, untrusted=9),
        _floor_case(1000, 172, 151, security=20, grinding=0),
        _floor_case(1000, 172, 151, security=64, grinding=64),
        _floor_case(5000, 200, 170, 0.1, 0.1, 30, 10),
    ]
    return cases


@topic(
    "safety_floor",
    "The safety floor a device computes (secagg/floor.py) for a cohort of n under its assumptions — corrupt fraction γ, "
    "dropout fraction δ, security_bits σ and grinding_bits g (failure ≤ 2^-(σ+g)) — and the server's plan. "
    "corrupt_count = floor(γ·n + 1e-9). threshold_floor(n, degree): complete graph (degree ≥ n − 1): "
    "floor((m + corrupt_count)/2) + 1 with m = n, null if above m; sparse (m = degree + 1, p = corrupt_count/(n − 1)): the "
    "least t in [floor(m/2) + 1, m] with log2_tail(degree, 2t − m, p) ≤ −(σ + g) − log2(n), where log2_tail(k, s, p) is "
    "−inf if s > k, 0 if s ≤ p·k, else −k·D(s/k ‖ p)/ln 2 (D the Bernoulli Kullback–Leibler divergence in nats; D(1 ‖ p) = "
    "−ln p; −inf when p = 0). connected(n, degree): true on the complete graph or when γ + δ = 0, else log2(n) + "
    "floor(degree/2)·log2(γ + δ) ≤ −(σ + g). safety_floor(n): half = ceil((σ + g + log2 n)/−log2(γ + δ)); degree = "
    "max(2, 2·half) if 2·half < n − 1, else n − 1 (γ + δ = 0: min(2, n − 1)); threshold = threshold_floor at it. check(n, degree, threshold, untrusted): 'degree' if sparse and below the floor's "
    "degree; else 'threshold' if no threshold is safe, if threshold < threshold_floor (on the complete graph, with more "
    "untrusted than corrupt_count, floor((m + untrusted)/2) + 1), or if untrusted ≥ 2t − m; else 'ok'. plan (dropout = "
    "δ, 2^-20 correctness): the least even degree from the floor's up to n − 2 whose threshold_floor ≤ live_threshold — "
    "live_threshold(n, k, δ) is the largest t ≤ m with log2_tail(k, m − t + 1, δ) ≤ −20 − log2(n) (t stops at 1), and on "
    "the complete graph n − ceil(δ·n − 1e-9) — else the complete graph with its threshold_floor. Floats are binary64; "
    "every case keeps at least 1e-9 from each logarithmic decision, so platform log functions agree on it.",
    _floor_cases(),
)
def safety_floor_vectors(case: Json) -> Json:
    a = floor.Assumptions(case["corrupt_fraction"], case["dropout_fraction"], case["security_bits"],
                          case["grinding_bits"])
    n, degree = case["n"], case["degree"]
    _clear_of_ties(n, degree, a)
    f = floor.safety_floor(n, a)
    plan = floor.plan(n, a.dropout_fraction, a)
    try:
        floor.check(n, degree, case["threshold"], a, untrusted=case["untrusted"])
        verdict = "ok"
    except floor.UnsafeParametersError as exc:
        verdict = str(exc).split(":", 1)[0]
    return {
        "corrupt_count": floor.corrupt_count(n, a),
        "safety_floor": {"degree": f.degree, "threshold": f.threshold},
        "threshold_floor": floor.threshold_floor(n, degree, a),
        "connected": floor.connected(n, degree, a),
        "check": verdict,
        "plan": {"degree": plan.degree, "threshold": plan.threshold},
    }


ISSUER_TEST_KEY = Path(__file__).parent / "data" / "issuer_test_key.pem"
"""A fixed 2048-bit RSA issuer key for the identity-token vectors (a test key: it vouches for nothing)."""


def issuer_test_key() -> Any:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    return load_pem_private_key(ISSUER_TEST_KEY.read_bytes(), None)


def _made_token(case: Json) -> tuple[bytes, Any]:
    key = issuer_test_key()
    pending = identity_token.request(key.public_key(), unh(case["identity"]), SeededRandom(case["seed"].encode()))
    return pending.finalize(blind_rsa.blind_sign(key, pending.blinded_msg)).encode(), pending


def _token_case(name: str, present: str = "as made", **kw: Any) -> Json:
    return {"name": name, "identity": _k("identity/" + name), "seed": "identity-token/" + name, "present": present, **kw}


@topic(
    "identity_tokens",
    "Identity tokens (secagg/identity_token.py, docs/identities.md): Privacy Pass type-2 tokens (RFC 9578) for an "
    "Ed25519 identity key under the fixed test issuer key (tests/support/data/issuer_test_key.pem). The device draws "
    "nonce (32 bytes), PSS salt (48) and blind (randbelow(n − 1) + 1) from SeededRandom(seed); token_input = 0x0002 ‖ "
    "nonce ‖ SHA-256('fa-identity-token/v1/' ‖ identity) ‖ SHA-256(issuer SPKI DER); the token is token_input ‖ "
    "RSABSSA-SHA384-PSS-Deterministic signature. `present` alters what is verified; `error` is the refusal's text.",
    [
        _token_case("a"),
        _token_case("b"),
        _token_case("another identity", present="for another identity"),
        _token_case("unknown key id", present="with another key id"),
        _token_case("bad signature", present="with a flipped signature bit"),
        _token_case("short", present="one byte short"),
        _token_case("type 3", present="as token type 3"),
    ],
)
def identity_tokens_vectors(case: Json) -> Json:
    key = issuer_test_key()
    token, pending = _made_token(case)
    shown, identity = bytearray(token), unh(case["identity"])
    match case["present"]:
        case "for another identity":
            identity = unh(_k("identity/someone else"))
        case "with another key id":
            shown[66:98] = hashlib.sha256(b"another issuer").digest()
        case "with a flipped signature bit":
            shown[-1] ^= 1
        case "one byte short":
            del shown[-1]
        case "as token type 3":
            shown[1] = 3
    error = None
    try:
        identity_token.verify(bytes(shown), identity, identity_token.trusted_keys([key.public_key()]))
    except identity_token.TokenError as exc:
        error = str(exc)
    assert (error is None) == (case["present"] == "as made"), (case, error)
    return {
        "issuer_spki": h(blind_rsa.public_key_der(key.public_key())),
        "token_key_id": h(identity_token.key_id(key.public_key())),
        "blinded_msg": h(pending.blinded_msg),
        "token": h(token),
        "verified_identity": h(identity),
        "verified_token": h(bytes(shown)),
        "error": error,
    }


_TLOG_LEAVES = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]


@topic(
    "translog",
    "The transparency log (translog/): RFC 9162 tree hashing and proofs over the transparency-dev reference "
    "leaves ('tree': every root, inclusion proof and consistency proof of the first 8 leaves); leaf bytes of "
    "each entry type (RFC 8785 JSON); a signed tree head and a witness cosignature (Ed25519 keys from seeds); "
    "and task proofs as a device receives them, each with the device's stored head and its verdict ('ok' or "
    "the first words of the refusal).",
    [{"name": "tree"}, {"name": "entries"}, {"name": "heads"}, {"name": "task_proofs"}],
)
def translog_vectors(case: Json) -> Json:
    from tests.support import translog_cases

    return translog_cases.compute(case["name"], _TLOG_LEAVES)


TS_TASK_SCHEMAS = ROOT / "device_sdk" / "js" / "src" / "kinds" / "taskSchemas.generated.ts"


def render_ts_task_schemas() -> str:
    """The TypeScript SDK's copy of the task schemas (the `task_schemas` topic's outputs, by kind)."""
    schemas = {case["kind"]: task_schemas_vectors(case)["schema"] for case in TOPICS["task_schemas"].cases}
    return ("/** Generated by `python -m tests.support.vectors` from each kind's `Task` model (queries/kind.py); do not edit.\n"
            " * The same schemas as tests/vectors/task_schemas.json. */\n\n"
            "export const TASK_SCHEMAS: Record<string, Record<string, unknown>> = "
            + json.dumps(schemas, ensure_ascii=False, indent=2) + ";\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.vectors", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on any difference")
    args = ap.parse_args(argv)
    VECTORS.mkdir(parents=True, exist_ok=True)
    differ = []
    outputs = [(VECTORS / f"{name}.json", render(name)) for name in TOPICS]
    outputs.append((TS_TASK_SCHEMAS, render_ts_task_schemas()))
    for path, rendered in outputs:
        text = rendered.encode("utf-8")
        if args.check:
            if not path.exists() or path.read_bytes() != text:
                differ.append(path.name)
        else:
            path.write_bytes(text)
            print(f"wrote {path.relative_to(ROOT)} ({len(text)} bytes)")
    if differ:
        print(f"vectors differ from the code: {', '.join(differ)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
