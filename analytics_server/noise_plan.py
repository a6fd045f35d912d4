"""Submit-time check of a query's rounds: noise the devices' samplers accept, a secure-aggregation ring of at
most 62 bits, and enough room in a cohort — so a query the server accepts is one its devices can run.

Without it, the server could plan a round whose per-device noise share the samplers refuse (Skellam μ above
1e15, discrete-Gaussian σ above 1e9) or whose sum does not fit the ring: every device rejects the task,
every cohort aborts, and the query forms cohorts forever while its privacy charge stays on the ledger.

Which rounds are checked: the first `PREVIEW_ROUNDS` rounds the kind plans from its initial state, each
decoded from an all-zero aggregate over the round's minimum number of contributors (the decode is the
kind's own pure code; nothing is stored). That covers every round shape of the built-in kinds — histogram
(one round), feature_stats (both rounds), training (label counts, evaluation, training) and heavy hitters
(whose later rounds have the same sensitivities and bound as the first, only a longer frontier) — with
the noise calibrated over the kind's whole `rounds_upper_bound`, exactly as the orchestrator will plan it.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from pydantic import BaseModel

from analytics_server import privacy
from queries import dp
from queries.kind import QueryKind, RoundPlan
from queries.spec import QuerySpec
from secagg.randomness import OsRandom

PREVIEW_ROUNDS = 4
"""Rounds planned at submit (each from the previous one decoded from a zero aggregate)."""


class NoisePlanError(ValueError):
    """A round the devices could not run; the message starts with the field to change (→ 422)."""


def preview_rounds(kind: QueryKind[Any, Any], params: BaseModel, state: Any, need: int) -> list[RoundPlan]:
    """The first rounds the kind would plan, each decoded from an all-zero aggregate of `need` contributors
    (from a copy of `state`: the caller's initial state is stored as it is)."""
    state = copy.deepcopy(state)
    plans: list[RoundPlan] = []
    for index in range(min(PREVIEW_ROUNDS, kind.rounds_upper_bound(params))):
        try:
            plan = kind.plan_round(params, state, index)
        except ValueError as exc:
            raise NoisePlanError(f"params: round {index} cannot be planned: {exc}") from None
        if plan is None:
            break
        plans.append(plan)
        if index + 1 < PREVIEW_ROUNDS:
            try:
                state = kind.decode_round(params, state, plan, np.zeros(plan.dim, dtype=np.int64), need)
            except (ValueError, ArithmeticError, KeyError, TypeError):
                break  # a decode that needs real data: the rounds planned so far are what can be checked
    return plans


def round_need(spec: QuerySpec, plan: RoundPlan, calibration: dp.QueryCalibration | None) -> int:
    """Contributors a round needs (the orchestrator's rule: the plan's or the cohort's minimum, ≥ t_min)."""
    need = plan.min_clients or spec.cohort.min_clients
    if calibration is not None:
        need = max(need, calibration.t_min)
    return need


def _bound_fields(params: BaseModel) -> list[str]:
    """The params that bound one device's contribution (the kind's `CONTRIBUTION_BOUND`), for messages."""
    return [f"params.{n}" for n in getattr(type(params), "CONTRIBUTION_BOUND", ())] or ["params"]


def check_rounds(
    spec: QuerySpec, kind: QueryKind[Any, Any], params: BaseModel, calibration: dp.QueryCalibration | None, state: Any
) -> int:
    """Refuse (NoisePlanError naming the field) a query whose planned rounds the devices could not run, starting
    from the kind's initial `state`; returns the number of rounds checked."""
    need = spec.cohort.min_clients if calibration is None else max(spec.cohort.min_clients, calibration.t_min)
    plans = preview_rounds(kind, params, state, need)
    for plan in plans:
        _check_round(spec, kind, params, calibration, plan)
    return len(plans)


def _check_round(
    spec: QuerySpec, kind: QueryKind[Any, Any], params: BaseModel, calibration: dp.QueryCalibration | None, plan: RoundPlan
) -> None:
    r = plan.round
    bound = _bound_fields(params)
    need = round_need(spec, plan, calibration)
    if need > spec.cohort.max_clients:
        raise NoisePlanError(
            f"cohort.max_clients: round {r} needs {need} contributors but cohort.max_clients is {spec.cohort.max_clients}"
        )
    try:
        noise = privacy.round_noise(calibration, plan, spec)
    except ValueError as exc:
        raise NoisePlanError(f"privacy.epsilon: round {r}: no noise can be planned: {exc}") from None
    if noise is not None:
        mechanism, scale = noise.noise.mechanism, noise.noise.per_device_scale
        try:  # the samplers' own validation (a zero-length draw checks the scale and draws nothing)
            dp.sample_noise(mechanism, scale, 0, OsRandom())
        except dp.PrivacyError as exc:
            what = "σ" if mechanism == "discrete_gaussian" else "μ"
            raise NoisePlanError(
                f"{bound[0]}: round {r} needs a per-device noise {what} of {scale:.3g}, which the devices' sampler "
                f"refuses ({exc}); every device would reject the task. Lower {' or '.join(bound)} (the noise grows "
                "with the contribution bound), or raise privacy.epsilon or cohort.min_clients"
            ) from None
    try:
        from analytics_server import validation

        bits = privacy.choose_bits(spec.cohort.max_clients, plan, noise)
        validation.round_bits(bits, spec.cohort.max_clients, validation.round_statement(spec, kind, plan, noise, calibration))
    except ValueError as exc:
        raise NoisePlanError(
            f"cohort.max_clients: round {r}: the secure-aggregation ring does not fit ({exc}); lower cohort.max_clients"
            f" or {' or '.join(bound)}"
        ) from None
