"""The privacy-spending rules the server applies when a query is submitted or ends, as pure functions.

An analyst token may hold at most `max_active` pending or running queries and spend at most its ε quota within
a window (`check_analyst`); a query must fit its source's budget (`queries.dp.ledger.Budget.check`); a query
that ends before any of its cohorts closed a masked-input phase gets its charge back (`refund_decision`).
Each rule takes plain values (counts and sums the caller read in its transaction) and returns a decision or
raises a typed error whose message names the setting to change. No I/O, no clock: the caller passes the time.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from queries.dp.ledger import PrivacyCost

QUOTA_TOLERANCE = 1e-9
"""Relative slack of the quota check (a sum of float costs that equals the quota fits)."""


class ActiveQueryLimit(Exception):
    """The analyst already has as many pending or running queries as allowed (HTTP 429)."""


class AnalystQuotaExceeded(Exception):
    """The query's ε does not fit the submitting analyst's quota (HTTP 422)."""


@dataclass(frozen=True)
class AnalystLimits:
    """What one analyst token may hold: ε of charged queries within `window_s` (0: lifetime) across all
    sources (`epsilon_quota`, None: unlimited; a token's own admin-set quota wins) and pending + running
    queries (`max_active`, None: unlimited)."""

    epsilon_quota: float | None = None
    window_s: float = 0.0
    max_active: int | None = None

    def window_start(self, now: float) -> float | None:
        """Unix time from which charges count against the quota (None: every charge counts)."""
        return now - self.window_s if self.window_s > 0 else None


@dataclass(frozen=True)
class AnalystUsage:
    """One analyst token's quota state (`GET /v1/quota`)."""

    token_id: int
    epsilon_quota: float | None
    epsilon_used: float
    epsilon_remaining: float | None
    window_s: float
    configured: bool
    """True when an admin set this token's quota; False when it is the server default."""
    active_queries: int
    max_active_queries: int | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def analyst_usage(token_id: int, own_quota: float | None, used_epsilon: float, active: int,
                  limits: AnalystLimits) -> AnalystUsage:
    """The token's usage from what was read: its own quota (None: the server default applies), the ε its
    charged queries spent within the window, and its pending + running queries."""
    quota = own_quota if own_quota is not None else limits.epsilon_quota
    remaining = None if quota is None else max(0.0, quota - used_epsilon)
    return AnalystUsage(token_id, quota, used_epsilon, remaining, limits.window_s, own_quota is not None, active,
                        limits.max_active)


def check_analyst(usage: AnalystUsage, cost: PrivacyCost | None) -> None:
    """Raise ActiveQueryLimit when the token holds its most active queries, AnalystQuotaExceeded when `cost`'s ε
    does not fit its quota; return when the query may be submitted."""
    if usage.max_active_queries is not None and usage.active_queries >= usage.max_active_queries:
        raise ActiveQueryLimit(
            f"max_active_queries_per_analyst: this token already has {usage.active_queries} pending or running "
            f"queries, the limit is {usage.max_active_queries}; wait for one to finish or cancel one"
        )
    quota = usage.epsilon_quota
    if cost is not None and quota is not None and usage.epsilon_used + cost.epsilon > quota * (1 + QUOTA_TOLERANCE):
        window = f"within {usage.window_s:g} s" if usage.window_s > 0 else "in total"
        raise AnalystQuotaExceeded(
            f"privacy.epsilon: the query costs epsilon={cost.epsilon:g} but this analyst's quota has only "
            f"epsilon={usage.epsilon_remaining:g} remaining of {quota:g} {window} (analyst_epsilon_quota)"
        )


class Refund(enum.Enum):
    """What happens to an ended query's charge."""

    REFUND = "refunded"
    """No masked input was seen: the charge is given back."""
    KEEP = "kept"
    """Masked inputs of some cohort were closed: the charge stays."""
    NONE = "none"
    """The query carries no charge."""


def refund_decision(cohorts_seen: int, charges: int) -> Refund:
    """Refund iff no masked-input phase of any of the query's cohorts closed (`cohorts_seen` counts those that
    did, finished cohorts included): until then the server holds no set of masked inputs it could unmask, so
    nothing about the data could have been seen. Once one closed (even if its cohort aborted later) the charge
    stays. `charges`: the query's charges still in force."""
    if charges <= 0:
        return Refund.NONE
    return Refund.KEEP if cohorts_seen > 0 else Refund.REFUND


__all__ = ["QUOTA_TOLERANCE", "ActiveQueryLimit", "AnalystLimits", "AnalystQuotaExceeded", "AnalystUsage", "Refund",
           "analyst_usage", "check_analyst", "refund_decision"]
