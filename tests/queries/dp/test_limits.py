"""The spending rules of `queries.dp.limits` (and the budget fit `Budget.check`) on plain values: what an analyst may
submit, what a source's budget takes, when an ended query gets its charge back. The messages are matched by tests
and docs elsewhere, so their exact text is pinned here too."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queries import dp
from queries.dp.limits import (
    ActiveQueryLimit,
    AnalystLimits,
    AnalystQuotaExceeded,
    Refund,
    analyst_usage,
    check_analyst,
    refund_decision,
)

eps = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)
pos = st.floats(min_value=1e-3, max_value=100.0, allow_nan=False)


def test_the_active_query_cap_refuses_the_query_that_would_exceed_it() -> None:
    limits = AnalystLimits(max_active=2)
    check_analyst(analyst_usage(7, None, 0.0, 1, limits), None)
    with pytest.raises(ActiveQueryLimit) as err:
        check_analyst(analyst_usage(7, None, 0.0, 2, limits), None)
    assert str(err.value) == ("max_active_queries_per_analyst: this token already has 2 pending or running queries, "
                              "the limit is 2; wait for one to finish or cancel one")


def test_the_quota_message_names_what_remains_and_the_window() -> None:
    usage = analyst_usage(7, None, 0.75, 0, AnalystLimits(epsilon_quota=1.0, window_s=3600))
    with pytest.raises(AnalystQuotaExceeded) as err:
        check_analyst(usage, dp.PrivacyCost(0.5, 1e-6))
    assert str(err.value) == ("privacy.epsilon: the query costs epsilon=0.5 but this analyst's quota has only "
                              "epsilon=0.25 remaining of 1 within 3600 s (analyst_epsilon_quota)")
    lifetime = analyst_usage(7, None, 0.75, 0, AnalystLimits(epsilon_quota=1.0))
    with pytest.raises(AnalystQuotaExceeded, match=r"remaining of 1 in total"):
        check_analyst(lifetime, dp.PrivacyCost(0.5, 1e-6))


@given(quota=pos, used=eps, cost=eps, own=st.none() | pos)
def test_a_query_fits_the_quota_iff_used_plus_cost_is_within_it(quota: float, used: float, cost: float,
                                                                 own: float | None) -> None:
    usage = analyst_usage(3, own, used, 0, AnalystLimits(epsilon_quota=quota))
    effective = own if own is not None else quota  # a token's own quota wins over the server default
    assert usage.epsilon_quota == effective and usage.configured == (own is not None)
    assert usage.epsilon_remaining == max(0.0, effective - used)
    fits = used + cost <= effective * (1 + 1e-9)
    try:
        check_analyst(usage, dp.PrivacyCost(cost, 0.0))
    except AnalystQuotaExceeded:
        assert not fits
    else:
        assert fits


@given(used=eps, cost=eps, active=st.integers(min_value=0, max_value=10))
def test_no_limit_set_admits_everything(used: float, cost: float, active: int) -> None:
    usage = analyst_usage(1, None, used, active, AnalystLimits())
    assert usage.epsilon_remaining is None and usage.max_active_queries is None
    check_analyst(usage, dp.PrivacyCost(cost, 0.0))


@given(now=st.floats(min_value=1e9, max_value=2e9), window=st.floats(min_value=0.0, max_value=1e6))
def test_the_window_starts_window_seconds_ago_or_never(now: float, window: float) -> None:
    start = AnalystLimits(epsilon_quota=1.0, window_s=window).window_start(now)
    assert start == (now - window if window > 0 else None)


@given(total=pos, spent=eps, cost=eps)
def test_the_budget_takes_a_cost_iff_it_fits(total: float, spent: float, cost: float) -> None:
    budget = dp.Budget(total, 0.5)
    fits = spent + cost <= total * (1 + 1e-9)
    try:
        left = budget.check(dp.PrivacyCost(spent, 0.0), dp.PrivacyCost(cost, 0.0))
    except dp.BudgetExceeded as exc:
        assert not fits
        assert exc.remaining_epsilon == max(0.0, total - spent)
    else:
        assert fits and left.epsilon == pytest.approx(max(0.0, total - spent - cost), abs=1e-9 * total)


@given(seen=st.integers(min_value=0, max_value=5), charges=st.integers(min_value=0, max_value=3))
def test_a_charge_is_refunded_iff_no_masked_input_was_seen(seen: int, charges: int) -> None:
    decision = refund_decision(seen, charges)
    if charges == 0:
        assert decision is Refund.NONE
    else:
        assert decision is (Refund.REFUND if seen == 0 else Refund.KEEP)


def test_the_limits_are_reachable_from_the_dp_package() -> None:
    assert dp.ActiveQueryLimit is ActiveQueryLimit and dp.refund_decision is refund_decision
