"""Known-answer cases for the transparency log (the `translog` vectors topic) — shared with its unit tests."""

from __future__ import annotations

import base64
import copy
import hashlib
from typing import Any

from translog import entries as te
from translog.check import LogCheckError, check_task_proof
from translog.heads import Signer, TreeHead, key_table
from translog.merkle import MerkleTree, leaf_hash
from translog.wire import CosignatureModel, HeadModel, TaskProof, WitnessedHead, b64

Json = dict[str, Any]
LOG_SEED = hashlib.sha256(b"fa-vectors/translog/log-key").digest()
WITNESS_SEED = hashlib.sha256(b"fa-vectors/translog/witness-key").digest()
ORIGIN = "vectors.example/fa-log"
TIME_MS = 1_764_300_000_000


def compute(name: str, leaves: list[str]) -> Json:
    return {"tree": _tree, "entries": _entries, "heads": _heads, "task_proofs": _task_proofs}[name](leaves)


def _tree(leaves: list[str]) -> Json:
    t = MerkleTree(leaf_hash(bytes.fromhex(x)) for x in leaves)
    n = len(leaves)
    return {
        "leaves": leaves,
        "leaf_hashes": [t.leaf(i).hex() for i in range(n)],
        "roots": {str(s): t.root(s).hex() for s in range(0, n + 1)},
        "inclusion": [{"index": i, "size": s, "proof": [p.hex() for p in t.inclusion_proof(i, s)]}
                      for s in range(1, n + 1) for i in range(s)],
        "consistency": [{"first": a, "second": b, "proof": [p.hex() for p in t.consistency_proof(a, b)]}
                        for b in range(1, n + 1) for a in range(1, b + 1)],
    }


TASK_SECAGG: Json = {"n": 60, "degree": 59, "threshold": 41, "threat_model": "active", "graph_seed": "members_root/v1"}
"""The sample task entry's cohort parameters (`SecAggConfig.public_summary()` of a 60-device complete cohort)."""


def sample_entries() -> list[Json]:
    spec = {"kind": "histogram", "source": "app.theme", "params": {"buckets": ["dark", "light"]}, "note": "é ✓"}
    return [
        te.budget_entry(te.DEFAULT_SOURCE, 10.0, 1e-5, TIME_MS),
        te.query_entry("q-1", "app.theme", "histogram", spec, TIME_MS + 1),
        te.charge_entry("q-1", "app.theme", 1.0, 1e-7, TIME_MS + 1),
        te.task_entry("q-1", 0, "c0ffee" * 5 + "00", hashlib.sha256(b"task").digest(), TIME_MS + 2, TASK_SECAGG),
        te.release_entry("q-1", "succeeded", {"counts": {"dark": 16.5, "light": 2}}, {"epsilon": 1.0, "delta": 1e-7},
                         TIME_MS + 3),
        te.charge_entry("q-2", "app.theme", 0.5, 0.0, TIME_MS + 4, refund=True),
    ]


def _entries(_: list[str]) -> Json:
    return {"entries": [{"entry": e, "canonical": te.canonical(e).decode("utf-8"),
                         "leaf_hash": te.entry_leaf_hash(e).hex()} for e in sample_entries()]}


def _heads(_: list[str]) -> Json:
    log, witness = Signer(LOG_SEED), Signer(WITNESS_SEED)
    head = TreeHead(ORIGIN, 6, MerkleTree(te.entry_leaf_hash(e) for e in sample_entries()).root(), TIME_MS + 5)
    signed = log.sign_head(head)
    cos = witness.cosign("witness.example", head, TIME_MS // 1000 + 6)
    return {
        "log_seed": LOG_SEED.hex(), "log_public_key": log.public_key.hex(), "log_key_id": log.key_id,
        "witness_seed": WITNESS_SEED.hex(), "witness_public_key": witness.public_key.hex(),
        "witness_key_id": witness.key_id,
        "head_message": head.message().decode(), "head": HeadModel.of(signed).model_dump(),
        "cosignature": CosignatureModel.of(cos).model_dump(),
    }


def task_proof_cases() -> list[Json]:
    """(name, proof JSON, device context, verdict): an honest proof and the attacks a device must refuse."""
    log, witness, rogue = Signer(LOG_SEED), Signer(WITNESS_SEED), Signer(hashlib.sha256(b"rogue").digest())
    es = sample_entries()
    t = MerkleTree(te.entry_leaf_hash(e) for e in es)
    digest = hashlib.sha256(b"task").digest()
    ctx = {"task_digest": digest.hex(), "secagg": TASK_SECAGG, "query_id": "q-1", "round": 0, "cohort_id": "c0ffee" * 5 + "00",
           "log_keys": [b64(log.public_key)], "witness_keys": [], "quorum": 1, "max_witness_age_s": 3600.0,
           "now_s": TIME_MS / 1000 + 60}

    def head(size: int, signer: Signer = log, tree: MerkleTree = t) -> HeadModel:
        return HeadModel.of(signer.sign_head(TreeHead(ORIGIN, size, tree.root(size), TIME_MS + size)))

    def last(size: int, tree: MerkleTree = t) -> Json:
        return head(size, log, tree).model_dump()

    def proof(size: int = 6, **over: Any) -> Json:
        p = TaskProof(index=3, entry=es[3], head=head(size), inclusion=[b64(x) for x in t.inclusion_proof(3, size)])
        return {**p.model_dump(exclude_none=True), **over}

    honest_from4 = proof(from_size=4, consistency=[b64(x) for x in t.consistency_proof(4, 6)])
    forked = MerkleTree(te.entry_leaf_hash(e) for e in es[:4] + [te.budget_entry("x", 1.0, 0.0, TIME_MS)])
    wit_head = witness.cosign("witness.example", TreeHead(ORIGIN, 5, t.root(5), TIME_MS + 5), TIME_MS // 1000 + 30)
    witnessed = WitnessedHead(head=head(5), cosignatures=[CosignatureModel.of(wit_head)],
                              consistency=[b64(x) for x in t.consistency_proof(5, 6)]).model_dump()
    wctx = {**ctx, "witness_keys": [b64(witness.public_key)]}
    other_entry = dict(es[3], task_digest=hashlib.sha256(b"decoy").hexdigest())
    cases = [
        ("honest, first head", proof(), ctx, None, "ok"),
        ("honest, consistent with the stored head", honest_from4, ctx, last(4), "ok"),
        ("another task's digest", proof(entry=other_entry), ctx, None, "the logged entry"),
        ("another cohort's parameters", proof(), {**ctx, "secagg": {**TASK_SECAGG, "threshold": 40}}, None,
         "the logged entry"),
        ("head signed by an unpinned key", proof(head=head(6, rogue).model_dump()), ctx, None, "tree head of size"),
        ("inclusion proof tampered", proof(inclusion=[b64(bytes(32))] + proof()["inclusion"][1:]), ctx, None,
         "inclusion proof"),
        ("no consistency proof from the stored head", proof(), ctx, last(4), "no consistency proof"),
        ("stored head from a forked log", proof(from_size=5, consistency=[b64(x) for x in t.consistency_proof(5, 6)]), ctx,
         last(5, forked), "consistency proof"),
        ("the log shrank", proof(size=5), ctx, last(6), "the log shrank"),
        ("witnessed, fresh", dict(honest_from4, witnessed=witnessed), wctx, last(4), "ok"),
        ("witness required, none given", honest_from4, wctx, last(4), "no witnessed head"),
        ("witnessed head too old", dict(honest_from4, witnessed=witnessed), {**wctx, "now_s": TIME_MS / 1000 + 7200},
         last(4), "the witnessed head has 0"),
    ]
    return [{"name": n, "proof": p, "context": c, "last": lst, "verdict": v} for n, p, c, lst, v in cases]


def run_case(case: Json) -> str:
    c = case["context"]
    last = HeadModel.model_validate(case["last"]).parse().head if case["last"] else None
    try:
        check_task_proof(
            TaskProof.model_validate(case["proof"]), task_digest=bytes.fromhex(c["task_digest"]), secagg=c["secagg"],
            query_id=c["query_id"], round=c["round"], cohort_id=c["cohort_id"],
            log_keys=key_table(base64.b64decode(k) for k in c["log_keys"]), last=last,
            witness_keys=key_table(base64.b64decode(k) for k in c["witness_keys"]),
            quorum=c["quorum"], max_witness_age_s=c["max_witness_age_s"], now_s=c["now_s"])
    except LogCheckError as exc:
        return str(exc)
    return "ok"


def _task_proofs(_: list[str]) -> Json:
    out = []
    for case in task_proof_cases():
        got = run_case(case)
        assert got.startswith(case["verdict"]), (case["name"], got)
        out.append(case)
    return {"cases": copy.deepcopy(out)}
