"""Distributed differential privacy: integer noise samplers, calibration with dp_accounting, bit widths,
release thresholds, budget math and the released `privacy` block (see docs/privacy.md).

Pure library: no I/O. The server calibrates (`calibrate_query`, `round_noise`, `choose_bits`), devices
sample (`sample_noise` with a `secagg.randomness` source), the server thresholds and reports (`release_threshold`,
`apply_count_threshold`, `privacy_block`) and keeps the ledger (`Budget`, `compose_costs`).

Devices need only the samplers: importing this package loads `errors` and `noise` (numpy); the
server-side names below load their module, and with it dp_accounting and scipy, on first access
(PEP 562 module `__getattr__`), so the device import path never pulls in the accountant.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from queries.dp.errors import BudgetExceeded, InsufficientContributors, PrivacyError
from queries.dp.noise import (
    MECHANISMS,
    discrete_gaussian_variance,
    sample_discrete_gaussian,
    sample_noise,
    sample_noise_bounded,
    sample_skellam,
)

_SERVER_SIDE: dict[str, tuple[str, ...]] = {
    "queries.dp.calibrate": (
        "QueryCalibration",
        "RoundNoise",
        "calibrate_query",
        "epsilon_spent",
        "fixed_calibration",
        "round_noise",
        "rounds_affordable",
        "suggest_scale",
    ),
    "queries.dp.plan": ("PlannedNoise", "cohort_noise", "cohort_threshold", "combined_noise", "plan_noise"),
    "queries.dp.ledger": ("Budget", "PrivacyCost", "PrivacyPolicy", "compose_costs", "compose_rdp"),
    "queries.dp.limits": ("ActiveQueryLimit", "AnalystLimits", "AnalystQuotaExceeded", "AnalystUsage", "Refund",
                          "analyst_usage", "check_analyst", "refund_decision"),
    "queries.dp.report": ("privacy_block",),
    "queries.dp.tails": (
        "apply_count_threshold",
        "check_min_contributors",
        "choose_bits",
        "confidence_halfwidth",
        "release_threshold",
    ),
}
_LAZY = {name: module for module, names in _SERVER_SIDE.items() for name in names}

if TYPE_CHECKING:
    from queries.dp.calibrate import (
        QueryCalibration,
        RoundNoise,
        calibrate_query,
        epsilon_spent,
        fixed_calibration,
        round_noise,
        rounds_affordable,
        suggest_scale,
    )
    from queries.dp.ledger import Budget, PrivacyCost, PrivacyPolicy, compose_costs, compose_rdp
    from queries.dp.limits import (
        ActiveQueryLimit,
        AnalystLimits,
        AnalystQuotaExceeded,
        AnalystUsage,
        Refund,
        analyst_usage,
        check_analyst,
        refund_decision,
    )
    from queries.dp.plan import PlannedNoise, cohort_noise, cohort_threshold, combined_noise, plan_noise
    from queries.dp.report import privacy_block
    from queries.dp.tails import (
        apply_count_threshold,
        check_min_contributors,
        choose_bits,
        confidence_halfwidth,
        release_threshold,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "MECHANISMS",
    "ActiveQueryLimit",
    "AnalystLimits",
    "AnalystQuotaExceeded",
    "AnalystUsage",
    "Refund",
    "analyst_usage",
    "check_analyst",
    "refund_decision",
    "Budget",
    "PlannedNoise",
    "BudgetExceeded",
    "InsufficientContributors",
    "PrivacyCost",
    "PrivacyError",
    "PrivacyPolicy",
    "QueryCalibration",
    "RoundNoise",
    "apply_count_threshold",
    "calibrate_query",
    "check_min_contributors",
    "choose_bits",
    "cohort_noise",
    "cohort_threshold",
    "combined_noise",
    "compose_costs",
    "compose_rdp",
    "confidence_halfwidth",
    "discrete_gaussian_variance",
    "epsilon_spent",
    "fixed_calibration",
    "plan_noise",
    "privacy_block",
    "release_threshold",
    "round_noise",
    "rounds_affordable",
    "sample_discrete_gaussian",
    "sample_noise",
    "sample_noise_bounded",
    "sample_skellam",
    "suggest_scale",
]
