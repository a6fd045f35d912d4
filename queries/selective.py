"""Intervals for noisy values that were released *because* they reached a threshold.

A histogram bucket (or a heavy hitter) is released only when its noisy count Y = c + N reaches the release
threshold τ. Among released values the high draws are over-represented, so the usual interval Y ± 1.96·σ covers
the true count c less often near τ: in the audit, 0–65 % for buckets whose true count lies just below or at τ.
The interval here is conditional on the release: it inverts the law of Y given Y ≥ τ (a normal truncated at τ,
the noise being a sum of many independent integer shares), so for every true count c,
P(c ∈ interval | released) = 95 % up to the normal approximation — the construction of exact post-selection
inference (Lee, Sun, Sun and Taylor, "Exact post-selection inference, with application to the lasso", Annals of
Statistics 2016), here for one truncated normal.

With G_c(y) = P(Y ≥ y | Y ≥ τ; c) = S((y − ½ − c)/σ) / S((τ − ½ − c)/σ) (S the normal survival function; the
continuity corrections of integer counts), G is increasing in c (the truncated normal family has monotone
likelihood ratio), and the interval's ends solve G_c(y) = α/2 (lower) and G_c(y + 1) = 1 − α/2, i.e. P(Y ≤ y |
released; c) = α/2 (upper) — the two one-sided tests of a discrete observation, as Clopper–Pearson's — and it is
widened to hold the observation itself when those tests leave nothing around it (an observation at the threshold
under noise much wider than one count) (Brent's method on log G, from scipy's log_ndtr so far tails do not
underflow). Far above τ it tends to
y ± 1.96·σ; at y ≈ τ its lower end is the floor (a released count at the threshold says little about how low
the truth may be).
"""

from __future__ import annotations

import math

from queries.uncertainty import interval

# scipy is imported where an interval is computed (the server, at finalize): devices import the kinds, not scipy

ALPHA = 0.05
"""1 − the intervals' confidence."""
SPAN = 40.0
"""How many σ around the observation the ends are searched for (log_ndtr is exact far beyond that)."""


def _log_g(c: float, y: float, sigma: float, cut: float) -> float:
    """log P(Y ≥ y | Y ≥ cut) for Y ~ N(c, σ²)."""
    from scipy.special import log_ndtr

    return float(log_ndtr((c - y) / sigma) - log_ndtr((c - cut) / sigma))


def selective_interval(
    observed: float, std: float, threshold: float, lower: float = -math.inf, alpha: float = ALPHA
) -> tuple[float, float]:
    """The (1 − alpha) interval for the true value of a count released because observed ≥ threshold, with the
    noise std; never below `lower` (a count's floor, 0). Without noise the observation itself."""
    if not math.isfinite(observed) or not math.isfinite(threshold) or observed < threshold:
        raise ValueError(f"selective_interval: the observation {observed!r} was not released at threshold {threshold!r}")
    if std <= 0:
        return observed, observed
    from scipy.optimize import brentq

    cut = threshold - 0.5
    lo_c, hi_c = observed - SPAN * std, observed + SPAN * std
    ends = []
    # integer counts, as for the threshold: the lower end solves P(Y ≥ y | released) = α/2 (Y ≥ y from y − ½), the
    # upper end P(Y ≤ y | released) = α/2, i.e. P(Y ≥ y + 1 | released) = 1 − α/2 (from y + ½)
    for target, y in ((math.log(alpha / 2), observed - 0.5), (math.log1p(-alpha / 2), observed + 0.5)):
        f_lo = _log_g(lo_c, y, std, cut) - target
        f_hi = _log_g(hi_c, y, std, cut) - target
        if f_lo >= 0:  # even far below, the release is this likely: the data cannot bound c from below
            ends.append(-math.inf)
        elif f_hi <= 0:
            ends.append(math.inf)
        else:
            ends.append(brentq(lambda c, t=target, y=y: _log_g(c, y, std, cut) - t, lo_c, hi_c, xtol=1e-9 * std))
    low, high = ends
    # a discrete observation at the edge with wide noise: P(Y = y | released) is below α/2 for every c above the
    # floor, so the test alone leaves nothing around y (e.g. y = τ = 18, σ = 50 gave [0, 0]); the interval always
    # holds the observation (only wider: coverage only grows)
    return max(lower, min(low, observed)), max(lower, high, observed)


def released_interval(value: float, std: float, threshold: float | None, lower: float = 0.0) -> tuple[float, float]:
    """The 95 % interval of a noisy count: conditional on its release when a threshold selected it
    (`selective_interval`), else value ± 1.96·std; never below `lower`."""
    if threshold is None or std <= 0 or value < threshold:
        return interval(value, std, lower)
    return selective_interval(value, std, threshold, lower)
