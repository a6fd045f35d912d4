"""The device's check of a task against the log, before it contributes (both SDKs implement exactly this).

`check_task_proof` raises `LogCheckError` unless all of these hold, and returns the head the device must
store as the last one it saw:

1. the logged entry is a `task` entry for this query, round and cohort, with the digest the device computed
   for its own assignment and the cohort parameters (`secagg`: n, degree, threshold, threat model, graph seed rule)
   of its own config;
2. the head is signed by a pinned log key;
3. the entry is included under that head (RFC 9162 inclusion proof);
4. the head extends the last head the device stored (same origin, no smaller, RFC 9162 consistency proof from
   it): a log that was rewritten, or a second view of it shown to this device, is refused;
5. with witnesses pinned: the bundle's witnessed head is signed by the log, cosigned by at least `quorum`
   distinct pinned witnesses, no older than `max_witness_age_s` by their clock, and the head extends it — a
   view the witnesses never saw can hold only what was logged after their last cosignature.
"""

from __future__ import annotations

from typing import Any

from translog.entries import entry_leaf_hash
from translog.heads import HeadError, SignedHead, TreeHead, verify_cosignature, verify_head
from translog.merkle import ProofError, verify_consistency, verify_inclusion
from translog.wire import TaskProof, hashes


class LogCheckError(ValueError):
    """The device cannot check its task against the log; the message says what failed."""


def check_task_proof(
    proof: TaskProof,
    *,
    task_digest: bytes,
    secagg: dict[str, Any],
    query_id: str,
    round: int,
    cohort_id: str,
    log_keys: dict[str, bytes],
    last: TreeHead | None,
    witness_keys: dict[str, bytes] | None = None,
    quorum: int = 1,
    max_witness_age_s: float = 3600.0,
    now_s: float = 0.0,
) -> SignedHead:
    e = proof.entry
    want = {"type": "task", "query_id": query_id, "round": round, "cohort_id": cohort_id,
            "task_digest": task_digest.hex(), "secagg": secagg}
    wrong = [k for k, v in want.items() if e.get(k) != v]
    if wrong:
        raise LogCheckError(f"the logged entry {proof.index} is not this task (it differs in {', '.join(wrong)})")
    try:
        signed = proof.head.parse()
        verify_head(signed, log_keys)
        head = signed.head
        verify_inclusion(entry_leaf_hash(e), proof.index, head.size, hashes(proof.inclusion, "inclusion"), head.root)
        if last is not None:
            if last.origin != head.origin:
                raise LogCheckError(f"the head is from log {head.origin!r}, the device follows {last.origin!r}")
            if head.size < last.size:
                raise LogCheckError(f"the log shrank: {head.size} entries, the device saw {last.size}")
            if proof.from_size != last.size:
                raise LogCheckError(f"no consistency proof from the device's last head (size {last.size})")
            verify_consistency(last.size, head.size, last.root, head.root, hashes(proof.consistency, "consistency"))
        if witness_keys:
            _check_witnessed(proof, head, log_keys, witness_keys, quorum, max_witness_age_s, now_s)
    except (HeadError, ProofError) as exc:
        raise LogCheckError(str(exc)) from None
    return signed


def _check_witnessed(proof: TaskProof, head: TreeHead, log_keys: dict[str, bytes], witness_keys: dict[str, bytes],
                     quorum: int, max_age_s: float, now_s: float) -> None:
    w = proof.witnessed
    if w is None:
        raise LogCheckError("no witnessed head: the device requires witnesses' cosignatures")
    ws = w.head.parse()
    verify_head(ws, log_keys)
    fresh: set[str] = set()
    for c in w.cosignatures:
        cos = c.parse()
        if cos.key_id in fresh or cos.key_id not in witness_keys:
            continue
        verify_cosignature(cos, ws.head, witness_keys)
        if now_s - cos.time <= max_age_s:
            fresh.add(cos.key_id)
    if len(fresh) < quorum:
        raise LogCheckError(f"the witnessed head has {len(fresh)} fresh cosignature(s) by pinned witnesses, "
                            f"need {quorum} (no older than {max_age_s:g} s)")
    if ws.head.origin != head.origin or ws.head.size > head.size:
        raise LogCheckError(f"the witnessed head (size {ws.head.size}) is not a prefix of the head (size {head.size})")
    verify_consistency(ws.head.size, head.size, ws.head.root, head.root, hashes(w.consistency, "witnessed.consistency"))


__all__ = ["LogCheckError", "check_task_proof"]
