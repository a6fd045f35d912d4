"""The device's side of the server's transparency log (docs/transparency.md): the log keys it trusts (pinned by
the app, else on first use), the last signed head it saw, and the check of each task before it contributes
(`translog.check.check_task_proof`)."""

from __future__ import annotations

import base64
import json

from device_sdk.admission import ParsedAssignment
from device_sdk.policy import DevicePolicy, pinned_keys
from device_sdk.store import LocalStore
from translog.check import LogCheckError, check_task_proof
from translog.heads import SignedHead, TreeHead, key_table
from translog.wire import HeadModel, LogKeyResponse, TaskProof

HEAD_META = "log_head"
KEYS_META = "log_keys"


class LogFollower:
    def __init__(self, store: LocalStore, policy: DevicePolicy) -> None:
        self.store = store
        self.policy = policy
        self.witnesses = key_table(pinned_keys(policy.witness_keys))

    def last(self) -> TreeHead | None:
        raw = self.store.get_meta(HEAD_META)
        return None if raw is None else HeadModel.model_validate_json(raw).parse().head

    def last_size(self) -> int | None:
        last = self.last()
        return None if last is None else last.size

    def keys(self) -> dict[str, bytes] | None:
        """The log keys to check heads under: the app's, else those pinned on first use (None: none yet)."""
        if self.policy.log_keys:
            return key_table(pinned_keys(self.policy.log_keys))
        raw = self.store.get_meta(KEYS_META)
        return None if raw is None else key_table(base64.b64decode(k) for k in json.loads(raw))

    def pin(self, answer: LogKeyResponse) -> dict[str, bytes]:
        """Trust on first use: keep the key the server showed (and its retired ones) from now on."""
        keys = [answer.public_key, *answer.previous_keys]
        table = key_table(pinned_keys(keys))
        self.store.set_meta(KEYS_META, json.dumps(keys))
        return table

    def check(self, proof: TaskProof | None, parsed: ParsedAssignment, now_s: float) -> SignedHead:
        """LogCheckError unless the task is in the log under a head that extends the last one seen."""
        if proof is None:
            raise LogCheckError("the server sent no transparency-log proof with the task")
        keys = self.keys()
        if not keys:
            raise LogCheckError("no log key pinned")
        a = parsed.assignment
        return check_task_proof(
            proof, task_digest=parsed.digest, secagg=parsed.secagg.public_summary(), query_id=a.query_id,
            round=a.round, cohort_id=a.cohort_id, log_keys=keys,
            last=self.last(), witness_keys=self.witnesses, quorum=self.policy.witness_quorum,
            max_witness_age_s=self.policy.witness_max_age_s, now_s=now_s)

    def accept(self, signed: SignedHead) -> None:
        """Store the head just checked as the last one seen (a later head must extend it)."""
        last = self.last()
        if last is None or signed.head.size >= last.size:
            self.store.set_meta(HEAD_META, HeadModel.of(signed).model_dump_json())


__all__ = ["HEAD_META", "KEYS_META", "LogCheckError", "LogFollower"]
