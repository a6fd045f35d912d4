"""`POST /v1/queries/preview`: what a query would release and how noisy, before anything is created or charged.

The spec goes through the submit checks (`spec_check.check_spec`: the same 4xx), then the kind's first rounds
are planned exactly as the noise-plan check plans them (`noise_plan.preview_rounds`, each decoded from an
all-zero aggregate over the round's minimum number of contributors), each round's noise is calibrated as the
orchestrator will calibrate it (`privacy.round_noise`: weight, encoding scale), and the kind turns the rounds'
noise into the expected std of each value it releases (`QueryKind.preview`). The stds are at the minimum
number of contributors: a larger cohort sizes its shares for itself less `cohort.dropout_allowance`
(`privacy.cohort_noise`), so the sums' std is at most 1/√(1 − allowance) larger (and means' smaller, whose
counts grow).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analytics_server import noise_plan, privacy
from queries import dp
from queries.kind import ExpectedValue, QueryKind, ReleaseWarning, RoundPreview
from queries.spec import QuerySpec
from queries.uncertainty import Z95


@dataclass(frozen=True)
class Preview:
    values: list[dict[str, Any]]
    warnings: list[dict[str, Any]]
    t_min: int | None


def build(spec: QuerySpec, kind: QueryKind[Any, Any], params: Any, calibration: dp.QueryCalibration | None) -> Preview:
    """The expected noise of every value the query would release (blocking: run it off the event loop)."""
    t_min = None if calibration is None else calibration.t_min
    need = spec.cohort.min_clients if t_min is None else max(spec.cohort.min_clients, t_min)
    rounds = []
    for plan in noise_plan.preview_rounds(kind, params, kind.initial_state(params), need):
        contributors = noise_plan.round_need(spec, plan, calibration)
        noise = privacy.round_noise(calibration, plan, spec)
        std = 0.0 if noise is None else dp.PlannedNoise.from_dict(noise).std_released(contributors)
        rounds.append(RoundPreview(plan, std, contributors))
    try:
        values, warnings = kind.preview(params, rounds)
    except (ValueError, KeyError, TypeError, ArithmeticError) as exc:  # a kind's preview must not fail the request
        values, warnings = [], [ReleaseWarning(None, f"the {kind.name} kind could not describe its values: {exc}")]
    out_warnings = [w.to_dict() for w in warnings]
    if calibration is None:
        out_warnings.insert(0, ReleaseWarning(None, "privacy.mechanism is 'none': the released sums are exact "
                                                    "(no differential privacy from noise)").to_dict())
    elif spec.privacy.noise_multiplier is not None:
        cal = calibration
        out_warnings.append(ReleaseWarning(None, f"privacy.noise_multiplier is fixed: the budget affords "
                                                 f"{dp.rounds_affordable(cal)} of the query's {cal.rounds} rounds; it "
                                                 "stops before the round that would exceed epsilon").to_dict())
    return Preview([_value(v) for v in values], out_warnings, t_min)


def _value(v: ExpectedValue) -> dict[str, Any]:
    out: dict[str, Any] = {"path": v.path, "std": float(v.std), "ci95_halfwidth": float(Z95 * v.std)}
    if v.note:
        out["note"] = v.note
    return out
