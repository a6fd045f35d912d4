"""The `privacy` block released with every result: what noise was added, what it guarantees, what was
thresholded — enough to reproduce the numbers from the stored calibration and rounds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from queries.dp.calibrate import QueryCalibration, RoundNoise, epsilon_spent


def privacy_block(
    cal: QueryCalibration | None,
    noises_per_round: Sequence[RoundNoise | None],
    contributors_per_round: Sequence[int],
    thresholds: dict[str, Any] | None = None,
    bits: Sequence[int] | None = None,
) -> dict[str, Any]:
    """JSON-ready `privacy` block. Without a calibration (mechanism "none") ε is null: no DP guarantee."""
    thresholds = dict(thresholds or {})
    rounds_run = len(contributors_per_round)
    block: dict[str, Any] = {
        "mechanism": "none" if cal is None else cal.mechanism,
        "epsilon": None if cal is None else cal.epsilon,
        "delta": None if cal is None else cal.delta,
        "contributors": list(map(int, contributors_per_round)),
        "rounds": rounds_run,
        "thresholds": thresholds,
    }
    if bits is not None:
        block["bits"] = list(map(int, bits))
    if cal is None:
        block["epsilon_spent"] = None
        return block
    per_round: list[dict[str, object] | None] = []
    for noise, contributors in zip(noises_per_round, contributors_per_round):
        if noise is None:
            per_round.append(None)
            continue
        per_round.append({
            ("sigma" if noise.mechanism == "discrete_gaussian" else "mu"): noise.total_scale,
            "per_device_scale": noise.per_device_scale,
            "sensitivity": {"l1": noise.l1, "l2": noise.l2},
            "noise_std": noise.std(contributors),
            "contributors": int(contributors),
            "privacy_weight": noise.weight,
            "budget_share": noise.weight / cal.rounds,
        })
    block |= {
        "accountant": "rdp (dp_accounting)",
        "rounds_calibrated": cal.rounds,
        "t_min": cal.t_min,
        "sample_rate": cal.sample_rate,
        "noise_multiplier": cal.noise_multiplier,
        "epsilon_spent": epsilon_spent(cal, min(sum(n.weight for n in noises_per_round if n is not None), cal.rounds)),
        "epsilon_charged": cal.epsilon,
        "noise": per_round,
    }
    if block["epsilon_spent"] < cal.epsilon * (1 - 1e-9):
        block["epsilon_note"] = (
            f"the {rounds_run} rounds that ran account for ε = {block['epsilon_spent']:.3g} by themselves, but the "
            f"guarantee and the source's charge stay at ε = {cal.epsilon:g}: the noise was calibrated for "
            f"{cal.rounds} rounds and how many ran depended on the data")
    first = next((n for n in noises_per_round if n is not None), None)
    if first is not None:  # the headline numbers of the first noisy round (single-round kinds: the only one)
        block["sigma" if first.mechanism == "discrete_gaussian" else "mu"] = first.total_scale
        block["sensitivity"] = {"l1": first.l1, "l2": first.l2}
    return block
