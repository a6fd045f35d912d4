"""Distributed differential privacy: integer noise samplers, calibration with dp_accounting, bit widths,
release thresholds, budget math and the released `privacy` block (see docs/privacy.md).

Pure library: no I/O. The server calibrates (`calibrate_query`, `round_noise`, `choose_bits`), devices
sample (`sample_noise` with a `secagg.randomness` source), the server thresholds and reports (`release_threshold`,
`apply_count_threshold`, `privacy_block`) and keeps the ledger (`Budget`, `compose_costs`).
"""

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
from queries.dp.errors import BudgetExceeded, InsufficientContributors, PrivacyError
from queries.dp.ledger import Budget, PrivacyCost, PrivacyPolicy, compose_costs, compose_rdp
from queries.dp.noise import (
    MECHANISMS,
    discrete_gaussian_variance,
    sample_discrete_gaussian,
    sample_noise,
    sample_skellam,
)
from queries.dp.report import privacy_block
from queries.dp.tails import (
    apply_count_threshold,
    check_min_contributors,
    choose_bits,
    confidence_halfwidth,
    release_threshold,
)

__all__ = [
    "MECHANISMS",
    "Budget",
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
    "compose_costs",
    "compose_rdp",
    "confidence_halfwidth",
    "discrete_gaussian_variance",
    "epsilon_spent",
    "fixed_calibration",
    "privacy_block",
    "release_threshold",
    "round_noise",
    "rounds_affordable",
    "sample_discrete_gaussian",
    "sample_noise",
    "sample_skellam",
    "suggest_scale",
]
