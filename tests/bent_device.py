"""Cheating devices for the validity tests: the real SDK with its contribution bent just before masking.

`bend(monkeypatch)` swaps `device_sdk.client.masked_content` for a wrapper that leaves honest devices alone and
bends the devices whose local rows hold a `BENT` marker ("__bent__:<attack>"; the device's rows reach the wrapper
through a context variable set around `DeviceClient._run_assignment`), each as an attacker who knows the protocol
would:

- vote_twice, vote_1000, negative, noise_beyond_bound, beyond_range, negative_weight: masks a bent vector (two
  votes, a vote of 1,000, a −1 entry, a noise entry far beyond B, a model update's entry 3× its bound, a model
  update's weight below 0) behind a valid proof (of the vector without its votes, its ranges clipped), so the cheat
  is caught by the opening check after unmasking;
- "<any of those>+proved": the same bent vector proved by the real prover with its checks switched off — a bit that
  is not a bit, a count or range broken — so the proof is refused when the masked input arrives;
- zero_count (feature_stats): claims no rows and every moment at its largest — each entry within its range, the
  relations broken (a first moment above its count, a second moment above the bins' sum) — with the proof a
  prover without checks makes for it (valid for a statement without relations; refused with them);
- zero_second (feature_stats): honest in every round but the second moments, where it lies as zero_count does
  (every second moment at its largest, no rows in the bins);
- forged: sends random bytes of the right length as its proof (caught when the masked input arrives);
- replayed: sends a valid proof made for another party of the cohort (caught when the masked input arrives).
"""

from __future__ import annotations

import contextvars
import os
from typing import Any

import numpy as np
import pytest

import device_sdk.client
from device_sdk import validity as device_validity
from device_sdk.admission import ParsedAssignment
from queries.envelope import Assignment
from secagg.validity import ProofContext, blind_limbs, proof_size
from secagg.validity import proof as proof_module
from secagg.validity import statement as statement_module
from secagg.validity.statement import Ranged, Signs

BENT = "__bent__:"
_ROWS: contextvars.ContextVar[list[Any]] = contextvars.ContextVar("bent_rows", default=[])
PROVED = "+proved"
ATTACKS = ("vote_twice", "vote_1000", "negative", "noise_beyond_bound", "beyond_range", "negative_weight", "zero_count",
           "zero_second", "forged", "replayed")


def _unchecked_prove(statement, context, values, noise, source):  # noqa: ANN001, ANN202
    """The real prover with its input checks switched off (what a cheater would run)."""
    original = statement_module.Statement.check
    try:
        statement_module.Statement.check = lambda self, values: None  # type: ignore[method-assign]
        bound = statement.noise_bound
        clipped = None if noise is None else [max(-bound, min(bound, int(e))) for e in noise]
        return proof_module.prove(statement, context, values, clipped, source)
    finally:
        statement_module.Statement.check = original  # type: ignore[method-assign]


def bent_contribution(attack: str, parsed: ParsedAssignment, rows: list[Any], draws: Any) -> tuple[np.ndarray, bytes]:
    a, kind, digest = parsed.assignment, parsed.kind, parsed.digest
    proved_lie = attack.endswith(PROVED)  # "<attack>+proved": the honest prover's proof of the bent vector itself
    attack = attack.removesuffix(PROVED)
    honest_rows = [r for r in rows if not (isinstance(r, str) and r.startswith(BENT))]
    vec, proof = device_validity.masked_content(parsed, kind.contribute(parsed.task, honest_rows, draws.kind), draws)
    assert proof is not None, "the cohort does not validate inputs"
    if attack == "zero_second" and a.task.get("stage") != "second_moments":
        return vec, proof  # honest until the second moments
    dim = len(vec) - len(blind_limbs(0))
    statement = parsed.statement.with_noise(a.noise.encoding_scale if a.noise else 1, a.validation.noise_bound)
    ctx = ProofContext(bytes.fromhex(a.secagg["session_id"]), a.query_id, a.round, a.party_id, digest)
    s = statement.encoding_scale
    if attack == "forged":
        return vec, os.urandom(proof_size(statement))
    if attack == "replayed":
        other = ProofContext(ctx.session_id, ctx.query_id, ctx.round, ctx.party % int(a.secagg["n"]) + 1, digest)
        replay, _ = proof_module.prove(statement, other, kind.contribute(parsed.task, honest_rows, draws.kind).tolist(),
                                       None, draws.validity) if not statement.noise_bound else (None, None)
        if replay is None:  # with noise: a proof for another party of an honest noise share
            x = np.zeros(dim, dtype=np.int64)
            replay, _ = proof_module.prove(statement, other, x.tolist(), [0] * dim, draws.validity)
        return vec, replay
    x = np.zeros(dim, dtype=np.int64)
    noise = np.zeros(dim, dtype=np.int64)
    if attack == "vote_twice":
        x[0] = x[1] = 1
    elif attack == "vote_1000":
        x[0] = 1000
    elif attack == "negative":
        x[0] = -1
    elif attack == "noise_beyond_bound":
        noise[0] = 50 * max(statement.noise_bound, 1) + 1000
    elif attack in ("beyond_range", "negative_weight"):  # an update entry 3× its clip bound; a weight below 0
        ranged = [(seg, at) for seg, at in zip(statement.segments, statement.offsets()) if isinstance(seg, Ranged)]
        seg, at = ranged[0] if attack == "beyond_range" else ranged[1]
        x[at] = 3 * seg.high + 1 if attack == "beyond_range" else -seg.high  # within the ring: the SDK refuses wider
    elif attack in ("zero_count", "zero_second"):
        ranged = [(seg, at) for seg, at in zip(statement.segments, statement.offsets()) if isinstance(seg, Ranged)]
        first, _ = ranged[0]
        if len(ranged) == 2 and ranged[1][0].low < 0:  # first moments: counts 0, centred first moments at the top
            x[first.size:2 * first.size] = first.high
        else:  # second moments: at the top, no rows in the bins (when there are bins)
            x[:first.size] = first.high
    else:
        raise ValueError(attack)
    if attack in ("zero_count", "zero_second") or proved_lie:  # prove the lie itself (a statement without relations took zero_count)
        proof, blind = _unchecked_prove(statement, ctx, x.tolist(), noise.tolist() if statement.noise_bound else None,
                                        draws.validity)
        return np.concatenate([x * s + noise, np.asarray(blind_limbs(blind), dtype=np.int64)]), proof
    proved = x.copy()  # a proof of the bent vector itself is refused: prove a valid one (no votes, ranges clipped)
    for seg, at in zip(statement.segments, statement.offsets()):
        if isinstance(seg, Ranged):
            proved[at:at + seg.size] = np.clip(proved[at:at + seg.size], seg.low, seg.high)
        elif isinstance(seg, Signs):
            proved[at:at + seg.size] = np.clip(proved[at:at + seg.size], -1, 1)
        else:
            proved[at:at + seg.size] = 0
    proof, blind = _unchecked_prove(statement, ctx, proved.tolist(), noise.tolist() if statement.noise_bound else None,
                                    draws.validity)
    content = x * s + noise
    return np.concatenate([content, np.asarray(blind_limbs(blind), dtype=np.int64)]), proof


def bend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Devices whose rows hold "__bent__:<attack>" cheat with that attack; the others stay honest."""
    honest = device_sdk.client.masked_content
    run = device_sdk.client.DeviceClient._run_assignment

    async def run_assignment(self: Any, a: Assignment, *args: Any) -> Any:
        token = _ROWS.set(self.store.rows(a.source))
        try:
            return await run(self, a, *args)
        finally:
            _ROWS.reset(token)

    def masked_content(parsed: ParsedAssignment, x: np.ndarray, draws: Any) -> tuple[np.ndarray, bytes | None]:
        rows = _ROWS.get()
        marker = next((r for r in rows if isinstance(r, str) and r.startswith(BENT)), None)
        if marker is None or parsed.assignment.validation is None:
            return honest(parsed, x, draws)
        return bent_contribution(marker[len(BENT):], parsed, rows, draws)

    monkeypatch.setattr(device_sdk.client.DeviceClient, "_run_assignment", run_assignment)
    monkeypatch.setattr(device_sdk.client, "masked_content", masked_content)
