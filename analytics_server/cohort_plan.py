"""Planning one cohort: a pure function from the query, its round and the chosen members to everything the cohort
is — `plan_cohort(...) -> CohortPlan`.

The orchestrator parses a query once (`QueryContext`: spec, kind, calibration) and each round once
(`RoundContext`: plan, typed noise), picks the members, and calls `plan_cohort`; the runtime
(`CohortRuntime.from_plan`) builds the protocol's session from the plan. What the plan decides:

- t_c and the devices' noise: every share sized for t_c = max(t_min, n − ⌈a·n⌉) contributors
  (`privacy.cohort_noise`), and at least t_c survivors to unmask (`need`);
- the validity statement every masked input proves (`validation.round_statement`), when the protocol carries
  proofs and the round asks for them;
- the `SecAggConfig`: graph degree and share threshold at or above the floor every device computes
  (`secagg.floor.plan`, live at the spec's dropout allowance), the survivor threshold `need`;
- the protocol (`analytics_server.protocols`) — the seam where a second protocol plugs in beside SecAgg;
- each member's assignment and the cohort's task digest, and what a refused sum or too few survivors mean.

No I/O, no clock, no randomness: the session id comes in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from analytics_server import privacy, validation
from analytics_server.services.blame_service import FailedOpening
from analytics_server.protocols import CohortProtocol
from queries import dp
from queries.envelope import Assignment, AssignmentPrivacy
from queries.kind import QueryKind, RoundPlan
from queries.spec import QuerySpec
from queries.task_digest import task_digest
from secagg import floor
from secagg.config import GraphKind, SecAggConfig
from secagg.validity import Statement


@dataclass(frozen=True)
class QueryContext:
    """A running query as parsed once when its task starts."""

    id: str
    spec: QuerySpec
    spec_json: dict[str, Any]
    """The spec as stored and shown to analysts: every assignment carries it (part of the task digest)."""
    kind: QueryKind[Any, Any]
    calibration: dp.QueryCalibration | None
    rounds_upper_bound: int


@dataclass(frozen=True)
class RoundContext:
    """A stored round as cohort planning reads it, parsed once."""

    id: int
    index: int
    plan: RoundPlan
    noise: dp.PlannedNoise | None
    """The round's noise (shares sized for t_min); each cohort resizes its shares for its own t_c."""
    bits: int
    need: int
    """Contributors the round needs (≥ t_min): every cohort needs at least this many survivors."""


@dataclass(frozen=True)
class ServerTerms:
    """What the server's settings and process add to every cohort it plans."""

    server_url: str | None
    """Named in assignments as where phase requests go (None: where the device checked in)."""
    failed_opening_extra_runs: int
    blame_quorum: int
    default_budget: dp.Budget


@dataclass(frozen=True)
class CohortPlan:
    """Everything one cohort is, fixed before it runs."""

    cohort_id: str
    query_id: str
    round_id: int
    round_index: int
    round_plan: RoundPlan
    members: Mapping[str, int]
    """Device id → party id (1..n)."""
    protocol: CohortProtocol
    config: SecAggConfig
    t_c: int | None
    """The contributors every noise share is sized for (None without noise)."""
    need: int
    """Fewest survivors the cohort unmasks for: the round's need, and at least t_c."""
    noise: dp.PlannedNoise | None
    """The cohort's noise (shares sized for t_c); the assignments carry its device block."""
    statement: Statement | None
    """What every masked input proves (None: no proofs)."""
    assignments: Mapping[str, Assignment]
    task_digest: bytes
    """The digest every honest member computes of its assignment (queries/task_digest.py)."""
    phase_timeout_s: float
    shortfall_note: str
    """Appended to an abort for too few survivors: why the cohort needs that many."""
    failed_opening: FailedOpening
    """What a refused sum does to the members (contributors filled in then)."""

    @property
    def n(self) -> int:
        return len(self.members)

    @property
    def session_id(self) -> bytes:
        return self.config.session_id

    @property
    def bits(self) -> int:
        return self.config.bits

    @property
    def kind_dim(self) -> int:
        """Entries of the kind's vector; the masked vector may carry blinding limbs after them."""
        return self.round_plan.dim

    def sum_check(self, total: np.ndarray, contributors: int) -> str | None:
        """Why the unmasked sum (the kind's entries, signed) is implausible, or None (`validation.implausible`)."""
        return validation.implausible(total, contributors, self.round_plan, self.noise, self.statement)


def secagg_config(session_id: bytes, n: int, dim: int, bits: int, need: int, dropout_allowance: float) -> SecAggConfig:
    """The cohort's parameters: degree and threshold at or above the floor every device computes
    (`secagg.floor.plan`), live at the spec's dropout allowance; the active threat model; `need` survivors."""
    safe = floor.plan(n, dropout_allowance)
    graph: GraphKind = "complete" if safe.complete else "sparse"
    return SecAggConfig(session_id=session_id, n=n, dim=dim, bits=bits, threat_model="active", graph=graph,
                        degree=None if safe.complete else safe.degree, threshold=safe.threshold, min_survivors=need)


def plan_cohort(
    query: QueryContext, rnd: RoundContext, members: Mapping[str, int], session_id: bytes, protocol: CohortProtocol,
    terms: ServerTerms,
) -> CohortPlan:
    """The cohort of `members` (device → party 1..n) in round `rnd` of `query`, aggregated by `protocol`."""
    spec, plan, n = query.spec, rnd.plan, len(members)
    t_c, noise = privacy.cohort_noise(spec, query.calibration, plan, rnd.noise, n)
    need = max(rnd.need, t_c or 0)
    statement = (validation.round_statement(spec, query.kind, plan, noise, query.calibration)
                 if protocol.proves_inputs else None)
    config = secagg_config(session_id, n, validation.cohort_dim(plan, statement), rnd.bits, need,
                           spec.cohort.dropout_allowance)
    cohort_id = session_id.hex()
    shared: dict[str, Any] = dict(
        query_id=query.id, round=rnd.index, cohort_id=cohort_id, kind=spec.kind, source=spec.source, task=plan.task,
        secagg=config.to_dict(), threat_model=config.threat_model, first_phase=int(protocol.first_phase),
        phase_timeout_s=spec.cohort.phase_timeout_s, noise=privacy.device_noise_block(noise),
        validation=validation.assignment_block(statement),
        privacy=AssignmentPrivacy.model_validate(
            privacy.assignment_privacy(spec, query.calibration, plan, query.rounds_upper_bound, t_c)),
        server_url=terms.server_url, spec=query.spec_json,
    )
    assignments = {d: Assignment(party_id=p, **shared) for d, p in members.items()}
    shortfall = "" if t_c is None or t_c <= rnd.need else (
        f": the noise shares were sized for {t_c} contributors (a cohort of {n} less cohort.dropout_allowance "
        f"{spec.cohort.dropout_allowance:g}); raise cohort.dropout_allowance if more devices than that drop out")
    return CohortPlan(
        cohort_id=cohort_id, query_id=query.id, round_id=rnd.id, round_index=rnd.index, round_plan=plan,
        members=dict(members), protocol=protocol, config=config, t_c=t_c, need=need, noise=noise, statement=statement,
        assignments=assignments,
        # every member's assignment differs only in its per-device fields: one digest for the cohort
        task_digest=task_digest(next(iter(assignments.values()))),
        phase_timeout_s=spec.cohort.phase_timeout_s, shortfall_note=shortfall,
        failed_opening=FailedOpening(
            round_index=rnd.index, contributors=frozenset(), reuse=noise is not None,
            extra_runs=terms.failed_opening_extra_runs, quorum=terms.blame_quorum, default_budget=terms.default_budget),
    )
