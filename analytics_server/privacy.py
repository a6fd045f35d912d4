"""The one place where differential privacy plugs into the server.

The orchestrator calls exactly these functions: `check_and_calibrate` at submit, `round_noise` and
`choose_bits` when a round is planned, `cohort_noise`, `device_noise_block` and `assignment_privacy` when a cohort
is planned (`analytics_server.cohort_plan`), `unscale` + `realized_noise` before the kind decodes a round,
`privacy_block` when the query finishes. The math lives in `queries.dp` (calibration, noise, bit width,
accounting); this module applies the server's policy (`policy_for`). Everything here is typed: a query's
calibration travels as `queries.dp.QueryCalibration` and a round's noise as `queries.dp.PlannedNoise`; each becomes
JSON only in its database column (`to_dict`) and is parsed once when read back (`stored_calibration`,
`stored_noise`).

Encoding amplification and round weights: every noisy round's stored noise is a `queries.dp.PlannedNoise`
(the calibrated noise of the scaled encoding s·Δ for the round's `privacy_weight`, and s as
`encoding_scale`). Devices multiply the kind's vector by s before adding their share; the server divides the
aggregate by s (rounding half up, post-processing) before the kind decodes, and reports the noise in the
kind's units (divided by s).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from analytics_server.delta_split import DeltaSplit, total_delta
from queries import dp
from queries.kind import AggregateNoise, QueryKind, RoundPlan
from queries.spec import QuerySpec
from secagg.encoding import bits_for


class PrivacyPolicyError(ValueError):
    """A privacy block the server refuses; the message names the field (→ 422)."""


def policy_for(
    profile: str,
    require_noise: bool | None,
    max_epsilon: float | None,
    max_delta: float | None = None,
    allow_server_trusted: bool | None = None,
) -> dp.PrivacyPolicy:
    """The server's policy: explicit settings win; otherwise production requires noise, caps ε at
    `PRODUCTION_MAX_EPSILON` and δ at `PRODUCTION_MAX_DELTA` and refuses server-trusted kinds; demo allows
    everything."""
    production = profile == "production"
    return dp.PrivacyPolicy(
        require_noise=production if require_noise is None else require_noise,
        max_epsilon=(PRODUCTION_MAX_EPSILON if production else None) if max_epsilon is None else max_epsilon,
        max_delta=(PRODUCTION_MAX_DELTA if production else None) if max_delta is None else max_delta,
        allow_server_trusted=(not production) if allow_server_trusted is None else allow_server_trusted,
    )


PRODUCTION_MAX_EPSILON = 2.0
PRODUCTION_MAX_DELTA = 1e-6


def check_and_calibrate(
    spec: QuerySpec, kind: QueryKind[Any, Any], params: Any, profile: str, policy: dp.PrivacyPolicy | None = None
) -> dp.QueryCalibration | None:
    """Validate the privacy block against policy; return the calibration (None without noise). It is stored as
    `to_dict()` and read back with `stored_calibration`."""
    policy = policy or policy_for(profile, None, None)
    mech = spec.privacy.mechanism
    own = kind.privacy(params) if mech == "none" else None  # a kind's own guarantee (TrieHH: sample+threshold)
    if own is not None and not policy.allow_server_trusted:
        raise PrivacyPolicyError(
            f"privacy.mechanism: {kind.name} with mechanism 'none' relies on its own guarantee "
            f"({own.get('mechanism')}), which holds against analysts but not against this server: the server "
            "chooses which devices take part and sees every un-noised vote count. This server requires noise added "
            "on the devices (a noisy mechanism, e.g. heavy_hitters mode 'secagg' with 'skellam'); its operator can "
            "admit such kinds with FA_ALLOW_SERVER_TRUSTED_KINDS=true"
        )
    try:
        if own is not None and own.get("epsilon") is not None:
            policy.check(str(own["mechanism"]), float(own["epsilon"]), own.get("delta"))
        else:
            policy.check(mech, None if mech == "none" else spec.privacy.epsilon, spec.privacy.delta)
    except dp.PrivacyError as exc:
        raise PrivacyPolicyError(str(exc)) from None
    if mech == "none":
        return None
    delta = DeltaSplit.of(spec).calibration  # less the share that pays for truncating the noise at B (proofs)
    assert spec.privacy.epsilon is not None  # PrivacySpec requires epsilon (and delta) with a noisy mechanism
    try:
        if spec.privacy.noise_multiplier is not None:  # analyst's z: run until the budget is spent
            cal = dp.fixed_calibration(
                mech, spec.privacy.epsilon, delta, spec.privacy.noise_multiplier,
                rounds=kind.rounds_upper_bound(params), t_min=spec.cohort.min_clients,
            )
        else:
            cal = dp.calibrate_query(
                mech,
                spec.privacy.epsilon,
                delta,
                rounds=kind.rounds_upper_bound(params),
                t_min=spec.cohort.min_clients,
            )
    except ValueError as exc:
        raise PrivacyPolicyError(str(exc)) from None
    return cal


def stored_calibration(data: dict[str, Any] | None) -> dp.QueryCalibration | None:
    """A query's stored calibration (its DB column) as the dataclass; `dp.PrivacyError` when malformed."""
    return None if data is None else dp.QueryCalibration.from_dict(data)


def budget_allows(calibration: dp.QueryCalibration | None, rounds_run: float) -> bool:
    """Whether noisy rounds of total weight `rounds_run` (unit rounds: the sum of their `privacy_weight`s) fit
    the query's ε (always true without noise, and for a z calibrated over the kind's round bound whose rounds'
    weights stay within it). The orchestrator asks before starting each round."""
    if calibration is None:
        return True
    cal = calibration
    return rounds_run <= cal.rounds * (1 + 1e-9) and dp.epsilon_spent(cal, rounds_run) <= cal.epsilon * (1 + 1e-9)


def query_cost(spec: QuerySpec, kind: QueryKind[Any, Any] | None = None, params: Any = None) -> dp.PrivacyCost | None:
    """What a query charges to its source's budget: its target (ε, δ); with mechanism none, the kind's own
    finite guarantee if it has one (TrieHH), else nothing (no noise, no guarantee, no charge)."""
    if spec.privacy.mechanism == "none":
        own = kind.privacy(params) if kind is not None else None
        if own and own.get("epsilon") is not None:
            return dp.PrivacyCost(float(own["epsilon"]), float(own.get("delta") or 0.0))
        return None
    return dp.PrivacyCost(float(spec.privacy.epsilon), float(spec.privacy.delta))  # type: ignore[arg-type]


def stored_noise(data: dict[str, Any] | None) -> dp.PlannedNoise | None:
    """A round's stored noise (its DB column: `RoundNoise` fields plus `encoding_scale`, written as
    `PlannedNoise.to_dict()`) as the dataclass; None for a round without noise; `dp.PrivacyError` when malformed."""
    return None if data is None else dp.PlannedNoise.from_dict(data)


def encoding_scale(noise: dp.PlannedNoise | None) -> int:
    """The integer factor devices multiply their vector by in this round (1 without noise)."""
    return 1 if noise is None else noise.scale


def round_weight(noise: dp.PlannedNoise | None) -> float:
    """Unit rounds of the query's budget a round spends (its `privacy_weight`; 0 without noise)."""
    return 0.0 if noise is None else float(noise.noise.weight)


def round_noise(
    calibration: dp.QueryCalibration | None, plan: RoundPlan, spec: QuerySpec | None = None
) -> dp.PlannedNoise | None:
    """Noise of one round (None without noise), stored with it as `to_dict()`: the noise of s·Δ with shares sized
    for t_min and the encoding scale s (`queries.dp.plan`), for the round's privacy weight. With `spec`, s suits
    every cohort the spec allows (`cohort_noise` sizes each cohort's shares for its own t_c)."""
    if calibration is None:
        return None
    largest = None
    if spec is not None:
        largest = dp.cohort_threshold(calibration.t_min, spec.cohort.max_clients, spec.cohort.dropout_allowance)
    return dp.plan_noise(calibration, plan, largest)


def cohort_noise(
    spec: QuerySpec, calibration: dp.QueryCalibration | None, plan: RoundPlan, noise: dp.PlannedNoise | None, n: int
) -> tuple[int | None, dp.PlannedNoise | None]:
    """(t_c, noise) of a cohort of `n` devices in a round with `noise`: every share sized for
    t_c = max(t_min, n − ⌈a·n⌉) contributors (`queries.dp.cohort_threshold`), the fewest survivors its devices
    unmask for. (None, None) without noise."""
    if calibration is None or noise is None:
        return None, None
    t = dp.cohort_threshold(calibration.t_min, n, spec.cohort.dropout_allowance)
    return t, dp.cohort_noise(calibration, plan, noise, t)


def _cohort_parts(
    spec: QuerySpec, calibration: dp.QueryCalibration, plan: RoundPlan, noise: dp.PlannedNoise,
    cohorts: list[tuple[int, int]],
) -> list[tuple[int, dp.PlannedNoise, int]]:
    """(t_c, noise, contributors) of each finished cohort, from its devices n and contributors."""
    parts = []
    for n, contributors in cohorts:
        t, own = cohort_noise(spec, calibration, plan, noise, n)
        assert t is not None and own is not None
        parts.append((t, own, contributors))
    return parts


def realized_noise(
    spec: QuerySpec, calibration: dp.QueryCalibration | None, plan: RoundPlan, noise: dp.PlannedNoise | None,
    cohorts: list[tuple[int, int]],
) -> AggregateNoise | None:
    """The noise in a round's aggregate summed over its finished cohorts, each (devices n, contributors): what
    the kind decodes with and the result reports. None without noise."""
    if calibration is None or noise is None:
        return None
    if not cohorts:
        return aggregate_noise(noise, 0)
    return dp.combined_noise([(own, c) for _, own, c in _cohort_parts(spec, calibration, plan, noise, cohorts)])


def realized_block(
    spec: QuerySpec, calibration: dp.QueryCalibration | None, plan: RoundPlan, noise: dp.PlannedNoise | None,
    cohorts: list[tuple[int, int]],
) -> dict[str, Any] | None:
    """For a result's privacy block: the round's realized noise std in released units and, per finished cohort,
    its devices, contributors and the contributors its shares were sized for."""
    if calibration is None or noise is None or not cohorts:
        return None
    parts = _cohort_parts(spec, calibration, plan, noise, cohorts)
    got = dp.combined_noise([(own, c) for _, own, c in parts])
    sized = [{"devices": n, "contributors": c, "shares_sized_for": t} for (n, _), (t, _, c) in zip(cohorts, parts)]
    return {"std": got.std, "cohorts": sized}


def device_noise_block(noise: dp.PlannedNoise | None) -> dict[str, Any] | None:
    """The `noise` block of an assignment: what each device passes to `queries.dp.sample_noise`, and s."""
    if noise is None:
        return None
    return {**noise.noise.task_block(), "encoding_scale": noise.scale}


@functools.lru_cache(maxsize=256)
def _affordable(calibration: dp.QueryCalibration) -> int:
    return dp.rounds_affordable(calibration)


def assignment_privacy(
    spec: QuerySpec, calibration: dp.QueryCalibration | None, plan: RoundPlan, rounds_upper_bound: int,
    t: int | None = None,
) -> dict[str, Any]:
    """The `privacy` block of an assignment (`queries.envelope.AssignmentPrivacy`): the public parameters from
    which a device recomputes the noise floor it accepts and charges its own ledger (docs/device_sdk.md).

    `rounds` is what the query's (ε, δ) covers: the calibrated rounds, or — with the analyst's own noise
    multiplier — the rounds that fit ε (the orchestrator stops before any later one); `weight` the unit rounds
    this round spends (its `privacy_weight`); `t_min` the contributors the cohort's shares are sized for (`t`,
    the cohort's t_c; default the query's t_min), which the device holds the survivors to."""
    validation = getattr(spec.privacy, "validation", None) or "none"
    sensitivities = {"l1_sensitivity": plan.l1_sensitivity, "l2_sensitivity": plan.l2_sensitivity}
    if calibration is None:
        return {"mechanism": "none", "rounds": max(1, rounds_upper_bound), **sensitivities, "validation": validation}
    cal = calibration
    rounds = cal.rounds if spec.privacy.noise_multiplier is None else _affordable(cal)
    return {
        # δ: the query's whole δ — with proofs the noise is calibrated for part of it, the rest pays for truncating
        # the noise at its bound (analytics_server.validation)
        "mechanism": cal.mechanism, "epsilon": cal.epsilon, "delta": total_delta(spec, cal.delta), "rounds": max(1, rounds),
        "t_min": max(cal.t_min, t or 0), **sensitivities, "validation": validation, "weight": plan.privacy_weight,
    }


def choose_bits(n: int, plan: RoundPlan, noise: dp.PlannedNoise | None) -> int:
    """Bit width of the secagg ring for n contributions of this round (wider with noise and scale)."""
    if noise is None:
        return bits_for(n, plan.max_abs)
    return int(dp.choose_bits(n, noise.scale * plan.max_abs, noise.noise, dim=plan.dim))


def unscale(noise: dp.PlannedNoise | None, aggregate: np.ndarray) -> np.ndarray:
    """The aggregate in the kind's units: ⌊(a + s/2) / s⌋ (round half up; identity for s = 1)."""
    if noise is None:
        return np.asarray(aggregate, dtype=np.int64)
    return noise.unscale(aggregate)


def aggregate_noise(noise: dp.PlannedNoise | None, contributors: int) -> AggregateNoise | None:
    """The noise argument of the kind's `decode_round`: the round's noise over `contributors` devices,
    with its standard deviation in the kind's units (after `unscale`); None without noise."""
    if noise is None:
        return None
    return noise.aggregate_noise(contributors)


def noise_halfwidth(noise: dp.PlannedNoise | None, contributors: int, confidence: float = 0.999) -> int:
    """h with P(|released count − true count| ≥ h) ≤ 1 − confidence, in the kind's units (after unscale)."""
    if noise is None:
        return 0
    s = noise.scale
    h = dp.confidence_halfwidth(noise.noise, contributors, confidence)
    return int(math.ceil(h / s + 0.5)) if s > 1 else int(h)


def privacy_block(
    spec: QuerySpec,
    calibration: dp.QueryCalibration | None,
    noises: list[dp.PlannedNoise | None],
    contributors: list[int],
    bits: list[int] | None = None,
    thresholds: dict[str, Any] | None = None,
    epsilon_spent_source: dict[str, float] | None = None,
    purposes: list[str | None] | None = None,
    realized: list[dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """The `privacy` object of a result (dp.privacy_block plus the server's extras).

    Without noise: epsilon null (no finite guarantee; JSON has no infinity), delta null, mechanism none.
    Always: the per-round contributor counts and bit widths, `t_min`/`min_clients` (the enforced minimum
    number of contributors), thresholds applied, and — when given — the source's budget after this query.
    With noise, σ/μ and sensitivities are those of the scaled encoding; `encoding_scale` per round says by
    what the aggregate was divided, `noise_std_released` is the noise std in released units, and
    `privacy_weight`/`budget_share` what part of the query's budget the round spent (with its `purpose`, as the
    kind planned it; `budget_split` lists them when the rounds' shares differ). `realized` (per round): the noise
    std of the sum as its cohorts drew it (`realized_noise`) as "std", and "cohorts" — each cohort's devices,
    contributors and the contributors its shares were sized for (`cohort_noise`); `noise_std_released` is then that
    std instead of the t_min-sized shares' std over the contributors.
    """
    if calibration is None:
        block = dict(dp.privacy_block(None, [None] * len(contributors), contributors, thresholds, bits=bits))
    else:
        cal = calibration
        rounds = [None if n is None else n.noise for n in noises]
        block = dict(dp.privacy_block(cal, rounds, contributors, thresholds, bits=bits))
        purposes = purposes or [None] * len(noises)
        drawn = realized or [None] * len(noises)
        for entry, n, c, purpose, real in zip(block.get("noise", []), noises, contributors, purposes, drawn):
            if entry is not None and n is not None:
                s = n.scale
                entry["encoding_scale"] = s
                entry["noise_std_released"] = n.noise.std(c) / s if real is None else real["std"]
                if real is not None:
                    entry["cohorts"] = real["cohorts"]
                if purpose:
                    entry["purpose"] = purpose
        entries = [e for e in block.get("noise", []) if e is not None]
        if len({round(e["privacy_weight"], 12) for e in entries}) > 1:
            block["budget_split"] = [
                {"round": i, "purpose": e.get("purpose"), "budget_share": e["budget_share"],
                 "epsilon_alone": dp.epsilon_spent(cal, e["privacy_weight"])}
                for i, e in enumerate(block["noise"]) if e is not None
            ]
        first = next((n for n in noises if n is not None), None)
        if first is not None:
            block["encoding_scale"] = encoding_scale(first)
    block["min_clients"] = spec.cohort.min_clients
    block.setdefault("t_min", spec.cohort.min_clients)
    if epsilon_spent_source is not None:
        block["source_budget"] = epsilon_spent_source
    return block
