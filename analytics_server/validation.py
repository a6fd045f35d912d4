"""The one place where validity proofs (`privacy.validation`, docs/validation.md) plug into the server.

- Submit (`resolve`): a spec's validation mode — "proofs" by default, in every profile, when the kind can prove its
  rounds' contributions; refused when asked of a kind that cannot; "none" refused by the production profile
  (`FA_REQUIRE_VALIDATION`) for a kind that can.
- Calibration: with proofs and noise, a share of δ pays for the devices' noise being truncated at the tail
  bound B; the noise is calibrated for the rest (`analytics_server.delta_split` owns that split).
- Rounds (`round_statement`, `round_bits`): the statement every contribution proves, with the encoding scale
  and B (`noise_bound`); the ring is widened so the blinding limbs and the worst valid sum cannot wrap.
- Cohorts (`CohortValidation`): verifies the masked inputs' proofs in batches as they arrive (a party whose proof
  fails is dropped) and, after unmasking, that the sum opens the contributors' commitments.
- Every round, with or without proofs (`implausible`): the server refuses a sum that no cohort of honest
  devices plus noise within its tail bound could produce, and says why.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analytics_server import privacy
from analytics_server.delta_split import DeltaSplit, uses_proofs
from queries import dp
from queries.kind import QueryKind, RoundPlan
from queries.spec import QuerySpec
from secagg.encoding import bits_for
from secagg.errors import InvalidInputError, MessageFormatError
from secagg.messages import MaskedInputProved, decode
from secagg.validity.layout import layout
from secagg.validity import (
    LIMB_BITS,
    LIMBS,
    InvalidProof,
    ProofContext,
    Statement,
    limbs_value,
    opening_holds,
    proof_size,
    verify,
    verify_batch,
)

IMPLAUSIBLE_LOG_PROB = math.log(1e-12)
"""A sum entry is implausible when honest noise exceeds it with probability below 1e-12 (over all entries)."""


class ValidationError(ValueError):
    """A spec whose validation mode the server refuses; the message names the field (→ 422)."""


def supports_proofs(kind: QueryKind[Any, Any], plans: list[RoundPlan]) -> bool:
    """Whether the kind proves the contributions of the rounds it plans (those previewed at submit)."""
    return bool(plans) and all(kind.validity(p.typed_task(kind)) is not None for p in plans)


def resolve(spec: QuerySpec, kind: QueryKind[Any, Any], plans: list[RoundPlan], require: bool) -> QuerySpec:
    """The spec with `privacy.validation` set: refuses "proofs" for a kind that cannot prove these rounds, and
    (when `require`) "none" for a kind that can. Unset: "proofs" whenever supported, in every profile."""
    supported = supports_proofs(kind, plans)
    asked = spec.privacy.validation
    if asked == "proofs" and not supported:
        raise ValidationError(
            f"privacy.validation: {kind.name} cannot prove the contributions of this query's rounds "
            "(its `validity` has no statement for them); use \"none\" — the server still refuses sums no "
            "honest cohort could produce"
        )
    if asked == "none" and supported and require:
        raise ValidationError(
            "privacy.validation: this server requires validity proofs for kinds that support them "
            "(FA_REQUIRE_VALIDATION); remove \"validation\" or set it to \"proofs\""
        )
    mode = asked or ("proofs" if supported else "none")
    return spec.model_copy(update={"privacy": spec.privacy.model_copy(update={"validation": mode})})


def noise_bound(spec: QuerySpec, calibration: dp.QueryCalibration, noise: dp.PlannedNoise, dim: int) -> int:
    """B: a device redraws a noise entry beyond ±B. Each entry lands beyond B with probability at most
    p = δ_trunc / ((1 + e^ε)·R·n_max·dim) (R rounds calibrated, n_max = cohort.max_clients), so the devices'
    noise vectors differ from the untruncated ones in total variation by at most R·n_max·dim·p, which costs
    (1 + e^ε) times that, i.e. δ_trunc, in δ (docs/validation.md)."""
    cal = calibration
    eps = min(float(spec.privacy.epsilon or cal.epsilon), 700.0)
    p = DeltaSplit.of(spec).truncation / ((1.0 + math.exp(eps)) * cal.rounds * spec.cohort.max_clients * max(dim, 1))
    from queries.dp.tails import noise_quantile

    return max(1, int(noise_quantile(noise.noise, 1, math.log(p / 2))))


def round_statement(
    spec: QuerySpec, kind: QueryKind[Any, Any], plan: RoundPlan, noise: dp.PlannedNoise | None,
    calibration: dp.QueryCalibration | None,
) -> Statement | None:
    """What every contribution to this round proves (None without proofs or when the round has no statement)."""
    if not uses_proofs(spec):
        return None
    base = kind.validity(plan.typed_task(kind))
    if base is None:
        return None
    if base.dim != plan.dim:
        raise ValueError(f"{kind.name}: validity statement covers {base.dim} entries, the round has {plan.dim}")
    if noise is None or calibration is None:
        return base
    return base.with_noise(noise.scale, noise_bound(spec, calibration, noise, plan.dim))


def round_bits(bits: int, max_clients: int, statement: Statement | None) -> int:
    """The ring of a proved round: wide enough for max_clients blinding limbs and the largest valid sum."""
    if statement is None:
        return bits
    return max(bits, bits_for(max_clients, (1 << LIMB_BITS) - 1), bits_for(max_clients, statement.max_abs()))


def cohort_dim(plan: RoundPlan, statement: Statement | None) -> int:
    """Length of the masked vector: the kind's entries, then the blinding limbs when proved."""
    return plan.dim + (LIMBS if statement is not None else 0)


def assignment_block(statement: Statement | None) -> dict[str, Any] | None:
    """The `validation` block of an assignment."""
    if statement is None:
        return None
    return {"mode": "proofs", "noise_bound": statement.noise_bound, "limbs": LIMBS, "limb_bits": LIMB_BITS}


MAX_BATCH = 256
"""Most proofs verified together (a batch's fixed-generator work is shared; a failing batch is halved)."""
MAX_BATCH_BITS = 1 << 17
"""…and at most this many statement bits in one batch: a batch keeps three scalars per bit of every proof until it is
checked (for bisection), about 100 bytes each, so ≈ 40 MB at most whatever the statement."""


@dataclass
class CohortValidation:
    """Proof checks of one cohort: each masked input's proof, then the opening of the unmasked sum.

    Proofs are verified in batches (`secagg.validity.verify_batch`): a masked input waits while the batch before it is
    checked, then goes with every input that arrived meanwhile, so a burst of arrivals shares the work on the fixed
    generators and a lone arrival is checked at once."""

    statement: Statement
    query_id: str
    round: int
    session_id: bytes
    task_digest: bytes = bytes(32)
    commitments: dict[int, bytes] = field(default_factory=dict)
    _verified: dict[tuple[int, bytes], bytes | str] = field(default_factory=dict)
    _pending: list[tuple[int, bytes, asyncio.Future[None]]] = field(default_factory=list)
    _worker: asyncio.Task[None] | None = None

    @property
    def proof_bytes(self) -> int:
        return proof_size(self.statement)

    def _context(self, party: int) -> ProofContext:
        return ProofContext(self.session_id, self.query_id, self.round, party, self.task_digest)

    @staticmethod
    def _key(party: int, proof: bytes) -> tuple[int, bytes]:
        return party, hashlib.sha256(proof).digest()

    def _check(self, party: int, proof: bytes) -> bytes | str:
        key = self._key(party, proof)
        done = self._verified.get(key)
        if done is None:
            try:
                done = verify(self.statement, self._context(party), proof)
            except InvalidProof as exc:
                done = str(exc)
            self._verified[key] = done
        return done

    def _verify_batch(self, batch: list[tuple[int, bytes]]) -> None:
        results = verify_batch([(self.statement, self._context(party), proof) for party, proof in batch])
        for (party, proof), result in zip(batch, results):
            self._verified[self._key(party, proof)] = result if isinstance(result, bytes) else str(result)

    async def preverify(self, party: int, message: bytes, executor: Executor | None) -> None:
        """Verify the proof a masked-input message carries, in a batch with the others arriving, in `executor` and
        outside the cohort's lock; `validator` then finds the result."""
        try:
            msg = decode(message)
        except MessageFormatError:
            return
        if not isinstance(msg, MaskedInputProved) or msg.party != party or self._key(party, msg.proof) in self._verified:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((party, msg.proof, done))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain(executor))
        await asyncio.shield(done)

    async def _drain(self, executor: Executor | None) -> None:
        loop = asyncio.get_running_loop()
        size = max(1, min(MAX_BATCH, MAX_BATCH_BITS // max(1, layout(self.statement).n)))
        while self._pending:
            batch, self._pending = self._pending[:size], self._pending[size:]
            try:
                await loop.run_in_executor(executor, self._verify_batch, [(p, proof) for p, proof, _ in batch])
            finally:  # a failure here leaves the results unset: `validator` then verifies that proof alone
                for _, _, done in batch:
                    if not done.done():
                        done.set_result(None)

    def validator(self, party: int, proof: bytes) -> None:
        """The secure-aggregation session's input validator: InvalidInputError unless the proof verifies."""
        out = self._check(party, proof)
        if isinstance(out, str):
            raise InvalidInputError(f"party {party}: validity proof refused: {out}")
        self.commitments[party] = out

    def opening(self, contributors: frozenset[int], total: np.ndarray) -> str | None:
        """Why the unmasked sum (signed, limbs last) does not open the contributors' commitments, or None."""
        dim = self.statement.dim
        summed, limbs = total[:dim], total[dim:]
        if len(limbs) != LIMBS or any(int(v) < 0 for v in limbs):
            return "detected cheating: the summed blinding limbs are malformed"
        missing = [u for u in contributors if u not in self.commitments]
        if missing:
            return f"detected cheating: parties {sorted(missing)[:5]} contributed without a verified commitment"
        if not opening_holds([self.commitments[u] for u in sorted(contributors)], summed.tolist(), limbs_value(limbs.tolist())):
            return ("detected cheating: the unmasked sum does not open the contributors' commitments (a device masked "
                    "another vector than the one it proved valid); nothing is released and the round retries with "
                    "other devices")
        return None


def implausible(
    total: np.ndarray, contributors: int, plan: RoundPlan, noise: dp.PlannedNoise | None, statement: Statement | None
) -> str | None:
    """Why a round's sum (signed, in the scaled encoding, limbs excluded) cannot come from `contributors` honest
    devices plus noise within its tail bound, or None. With proofs the bound is exact (n·(s·max|x| + B));
    otherwise n·s·max_abs per entry and n·s·Δ1 in L1, plus the summed noise's 1e-12 tail."""
    y = np.asarray(total, dtype=np.float64)
    n = int(contributors)
    if statement is not None:
        limit: float = n * statement.max_abs()
        worst = int(np.argmax(np.abs(y))) if y.size else 0
        if y.size and abs(y[worst]) > limit:
            return (f"implausible sum: entry {worst} is {int(y[worst])}, beyond what {n} valid contributions can reach "
                    f"(±{limit}); nothing is released")
        return None
    s = 1 if noise is None else noise.scale
    h = 0.0
    if noise is not None:
        from queries.dp.tails import noise_quantile

        h = float(noise_quantile(noise.noise, n, IMPLAUSIBLE_LOG_PROB - math.log(2 * max(plan.dim, 1))))
    limit = n * s * plan.max_abs + h
    if y.size:
        worst = int(np.argmax(np.abs(y)))
        if abs(y[worst]) > limit:
            return (f"implausible sum: entry {worst} is {int(y[worst])}, beyond {n} honest contributions of at most "
                    f"{s * plan.max_abs} each plus noise within {h:.0f}; a device sent an out-of-bounds vector; nothing "
                    "is released")
        l1 = float(np.abs(y).sum())
        l1_limit = n * s * plan.l1_sensitivity + plan.dim * h
        if l1 > l1_limit * (1 + 1e-9):
            return (f"implausible sum: its L1 norm {l1:.0f} exceeds {n} honest contributions of L1 at most "
                    f"{s * plan.l1_sensitivity:g} plus noise ({l1_limit:.0f}); nothing is released")
    return None


def privacy_fields(spec: QuerySpec, statements: list[Statement | None]) -> dict[str, Any]:
    """What the result's privacy block says about validation."""
    out: dict[str, Any] = {"validation": spec.privacy.validation or "none"}
    if uses_proofs(spec):
        out["validation_rounds"] = [
            None if st is None else {"noise_bound": st.noise_bound, "encoding_scale": st.encoding_scale}
            for st in statements
        ]
        if spec.privacy.mechanism != "none":
            split = DeltaSplit.of(spec)
            out["truncation_delta"] = split.truncation
            out["delta_calibrated"] = split.calibration
    return out


UNVALIDATED = ("no device proved its contribution (validation \"none\"): one modified device could have moved any "
               "value here as far as the server's plausibility check lets through — up to a whole cohort's worth of "
               "contributions — and nothing would show it; ask for \"validation\": \"proofs\" (docs/validation.md)")


def trust_warnings(block: dict[str, Any]) -> list[dict[str, Any]]:
    """The warnings a result carries first: without validity proofs, under `privacy.validation` (the console and
    `fa` show it above the values, never folded); after failed openings whose devices contributed again, under
    `privacy.runs_charged` (the source paid more than one run of the query)."""
    out = [] if block.get("validation") == "proofs" else [{"path": "privacy.validation", "message": UNVALIDATED}]
    if (runs := block.get("runs_charged", 1)) > 1:
        out.append({"path": "privacy.runs_charged", "message": (
            f"{block.get('failed_openings')} cohort sum(s) failed the opening check (a device masked another vector "
            f"than it proved); their devices contributed again, so the source was charged {runs} runs of this "
            "query's (ε, δ)")})
    return out
