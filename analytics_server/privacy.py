"""The one place where differential privacy plugs into the server.

The orchestrator calls exactly these functions: `check_and_calibrate` at submit, `round_noise` and
`choose_bits` when a round is planned, `decode_meta` before the kind decodes a round, `privacy_block` when
the query finishes. The math lives in `queries.dp` (calibration, noise, bit width, accounting); this module
only adapts it to stored JSON and applies the server's policy (profile "production" refuses mechanism none).
"""

from __future__ import annotations

from typing import Any

from queries.kind import QueryKind, RoundPlan
from queries.spec import QuerySpec
from secagg.encoding import bits_for


class PrivacyPolicyError(ValueError):
    """A privacy block the server refuses; the message names the field (→ 422)."""


def _dp() -> Any:
    try:
        from queries import dp
    except ImportError:
        return None
    return dp


def check_and_calibrate(spec: QuerySpec, kind: QueryKind, params: Any, profile: str) -> dict[str, Any] | None:
    """Validate the privacy block against policy; return the stored calibration (None without noise)."""
    mech = spec.privacy.mechanism
    if mech == "none":
        if profile == "production":
            raise PrivacyPolicyError("privacy.mechanism: 'none' is refused by the production profile")
        return None
    dp = _dp()
    if dp is None:
        raise PrivacyPolicyError(f"privacy.mechanism: {mech!r} is not available in this build (queries.dp missing)")
    try:
        cal = dp.calibrate_query(
            mech,
            spec.privacy.epsilon,
            spec.privacy.delta,
            rounds=kind.rounds_upper_bound(params),
            t_min=spec.cohort.min_clients,
        )
    except ValueError as exc:
        raise PrivacyPolicyError(str(exc)) from None
    return dict(cal.to_dict())


def round_noise(calibration: dict[str, Any] | None, plan: RoundPlan) -> dict[str, Any] | None:
    """Stored noise description of one round (None without noise). Devices get `device_noise_block` of it."""
    if calibration is None:
        return None
    dp = _dp()
    cal = dp.QueryCalibration.from_dict(calibration)
    return dict(dp.round_noise(cal, plan.l1_sensitivity, plan.l2_sensitivity, dim=plan.dim).to_dict())


def device_noise_block(noise: dict[str, Any] | None) -> dict[str, Any] | None:
    """The `noise` block of an assignment: what each device passes to `queries.dp.sample_noise`."""
    if noise is None:
        return None
    return dict(_dp().RoundNoise.from_dict(noise).task_block())


def choose_bits(n: int, plan: RoundPlan, noise: dict[str, Any] | None) -> int:
    """Bit width of the secagg ring for n contributions of this round (wider with noise)."""
    if noise is None:
        return bits_for(n, plan.max_abs)
    dp = _dp()
    return int(dp.choose_bits(n, plan.max_abs, dp.RoundNoise.from_dict(noise), dim=plan.dim))


def decode_meta(noise: dict[str, Any] | None, contributors: int) -> dict[str, Any]:
    """Extra `plan.meta` for the kind's decode: the summed noise's standard deviation."""
    if noise is None:
        return {"noise_std": 0.0}
    dp = _dp()
    return {"noise_std": float(dp.RoundNoise.from_dict(noise).std(contributors))}


def privacy_block(
    spec: QuerySpec,
    calibration: dict[str, Any] | None,
    noises: list[dict[str, Any] | None],
    contributors: list[int],
    bits: list[int] | None = None,
) -> dict[str, Any]:
    """The `privacy` object of a result.

    Without noise: epsilon null (no finite guarantee; JSON has no infinity), delta null, mechanism none,
    the per-round contributor counts and bit widths, and the minimum cohort size that was enforced.
    """
    dp = _dp()
    if calibration is None:
        block: dict[str, Any]
        if dp is None:
            block = {"epsilon": None, "delta": None, "mechanism": "none", "contributors": contributors}
        else:
            block = dict(dp.privacy_block(None, [None] * len(contributors), contributors, bits=bits))
        block["min_clients"] = spec.cohort.min_clients
        return block
    cal = dp.QueryCalibration.from_dict(calibration)
    rounds = [None if n is None else dp.RoundNoise.from_dict(n) for n in noises]
    block = dict(dp.privacy_block(cal, rounds, contributors, bits=bits))
    block.setdefault("mechanism", spec.privacy.mechanism)
    block.setdefault("contributors", contributors)
    return block
