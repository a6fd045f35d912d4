"""`POST /v1/queries/preview`: what a query would release and how noisy, before anything is created or charged.

The spec goes through the submit checks (`spec_check.check_spec`: the same 4xx), then the kind's first rounds
are planned exactly as the noise-plan check plans them (`noise_plan.preview_rounds`, each decoded from an
all-zero aggregate over the round's minimum number of contributors), each round's noise is calibrated as the
orchestrator will calibrate it (`privacy.round_noise`: weight, encoding scale), and the kind turns the rounds'
noise into the expected std of each value it releases (`QueryKind.preview`). `std` is at the minimum number of
contributors; `std_range` spans what the run may give — the kind previewed again for a cohort of `max_clients`
(shares sized for that cohort's t_c, `privacy.cohort_noise`: sums up to √(n/t_c) noisier, means less noisy as
their counts grow) and the kind's own range for what the data decides (a feature's rows per device, a bound
chosen from the data).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analytics_server import noise_plan, privacy
from queries import dp
from queries.kind import ExpectedValue, QueryKind, ReleaseWarning, RoundPreview
from queries.spec import QuerySpec
from queries.uncertainty import Z95

RANGE_SHOWN = 0.01
"""A value's std range is listed when its ends differ by more than this fraction."""


@dataclass(frozen=True)
class Preview:
    values: list[dict[str, Any]]
    warnings: list[dict[str, Any]]
    t_min: int | None


def _rounds(spec: QuerySpec, kind: QueryKind[Any, Any], params: Any, calibration: dp.QueryCalibration | None,
            need: int, cohort: int | None) -> list[RoundPreview]:
    """The first rounds as a cohort of `cohort` devices (all contributing) would carry them — shares sized for its
    t_c — or, with None, at each round's minimum of contributors with shares sized for t_min."""
    rounds = []
    for plan in noise_plan.preview_rounds(kind, params, kind.initial_state(params), need):
        contributors = noise_plan.round_need(spec, plan, calibration) if cohort is None else cohort
        noise = privacy.round_noise(calibration, plan, spec)
        if cohort is not None:
            noise = privacy.cohort_noise(spec, calibration, plan, noise, cohort)[1]
        std = 0.0 if noise is None else noise.std_released(contributors)
        rounds.append(RoundPreview(plan, std, contributors))
    return rounds


def build(spec: QuerySpec, kind: QueryKind[Any, Any], params: Any, calibration: dp.QueryCalibration | None) -> Preview:
    """The expected noise of every value the query would release (blocking: run it off the event loop): at the
    minimum of contributors, with `std_range` spanning the cohort sizes the spec allows (min_clients to max_clients)
    and what the kind says the data may change (e.g. rows per device)."""
    t_min = None if calibration is None else calibration.t_min
    need = spec.cohort.min_clients if t_min is None else max(spec.cohort.min_clients, t_min)
    try:
        values, warnings = kind.preview(params, _rounds(spec, kind, params, calibration, need, None))
        largest, _ = kind.preview(params, _rounds(spec, kind, params, calibration, need, spec.cohort.max_clients))
    except (ValueError, KeyError, TypeError, ArithmeticError) as exc:  # a kind's preview must not fail the request
        values, largest = [], []
        warnings = [ReleaseWarning(None, f"the {kind.name} kind could not describe its values: {exc}")]
    at_largest = {v.path: v for v in largest}
    out_warnings = [w.to_dict() for w in warnings]
    if calibration is None:
        out_warnings.insert(0, ReleaseWarning(None, "privacy.mechanism is 'none': the released sums are exact "
                                                    "(no differential privacy from noise)").to_dict())
    elif spec.privacy.noise_multiplier is not None:
        cal = calibration
        out_warnings.append(ReleaseWarning(None, f"privacy.noise_multiplier is fixed: the budget affords "
                                                 f"{dp.rounds_affordable(cal)} of the query's {cal.rounds} rounds; it "
                                                 "stops before the round that would exceed epsilon").to_dict())
    return Preview([_value(v, at_largest.get(v.path)) for v in values], out_warnings, t_min)


def _value(v: ExpectedValue, largest: ExpectedValue | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"path": v.path, "std": float(v.std), "ci95_halfwidth": float(Z95 * v.std)}
    ends = [v.std, *(v.std_range or ())]
    if largest is not None:
        ends += [largest.std, *(largest.std_range or ())]
    lo, hi = float(min(ends)), float(max(ends))
    if hi > lo * (1 + RANGE_SHOWN) and hi > 0:
        out["std_range"] = [lo, hi]
        out["ci95_halfwidth_range"] = [Z95 * lo, Z95 * hi]
    if v.note:
        out["note"] = v.note
    return out
