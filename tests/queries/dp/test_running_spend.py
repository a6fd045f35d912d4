"""`RunningSpend`: the basic composition of a changing set of charges as an exact running sum — what `fa audit`
checks each charge against instead of re-adding every earlier charge."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queries.dp.errors import PrivacyError
from queries.dp.ledger import Budget, PrivacyCost, RunningSpend, compose_costs

amounts = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
deltas = st.floats(min_value=0.0, max_value=1e-3, allow_nan=False, allow_infinity=False)
steps = st.lists(st.tuples(st.sampled_from(["add", "grow", "remove"]), st.integers(0, 7), amounts, deltas), max_size=60)


@given(steps)
@settings(max_examples=200, deadline=None)
def test_the_running_sum_is_the_exact_sum_of_the_charges_held(ops: list[tuple[str, int, float, float]]) -> None:
    tally = RunningSpend()
    held: dict[int, list[tuple[float, float]]] = {}
    for op, key, eps, delta in ops:
        if op == "remove":
            tally.remove(key)
            held.pop(key, None)
        elif op == "grow" and key not in held:
            continue
        else:
            tally.add(key, eps, delta, f"charge {key}")
            held.setdefault(key, []).append((eps, delta))
        rows = [c for parts in held.values() for c in parts]
        exact_eps = sum((Fraction(e) for e, _ in rows), Fraction(0))
        exact_delta = sum((Fraction(d) for _, d in rows), Fraction(0))
        assert tally.spent == PrivacyCost(float(exact_eps), float(exact_delta))  # correctly rounded, no drift
        assert len(tally) == len(held)


def test_refunds_leave_no_drift_where_float_sums_would() -> None:
    tally = RunningSpend()
    for i in range(10_000):
        tally.add(i, 0.1 * (i % 7 + 1), 1e-9 * (i % 3))
    float_sum = 0.0
    for i in range(10_000):
        float_sum += 0.1 * (i % 7 + 1)
    for i in range(10_000):
        float_sum -= 0.1 * (i % 7 + 1)
        tally.remove(i)
    assert float_sum != 0.0  # what a running float sum would say after every refund
    assert tally.spent == PrivacyCost(0.0, 0.0) and len(tally) == 0


def test_the_spend_agrees_with_compose_costs_and_checks_a_budget() -> None:
    costs = [(0.25, 1e-7), (0.5, 2e-7), (1.0, 0.0), (0.125, 1e-8)]
    tally = RunningSpend()
    for i, (e, d) in enumerate(costs):
        tally.add(i, e, d)
    assert tally.spent == compose_costs(costs)  # exact sums of these dyadic amounts
    with pytest.raises(PrivacyError, match="epsilon"):
        Budget(2.0, 1e-6).check(tally.spent, (0.5, 0.0))
    assert Budget(2.0, 1e-6).check(tally.spent, (0.125, 0.0)).epsilon == pytest.approx(0.0)


def test_a_charge_that_is_no_cost_is_named_until_it_is_removed() -> None:
    tally = RunningSpend()
    tally.add("a", 1.0, 1e-7, "charge 3")
    tally.add("b", -0.5, 0.0, "charge 8")
    with pytest.raises(PrivacyError, match=r"^charge 8\.epsilon: must be a finite number ≥ 0, got -0\.5$"):
        _ = tally.spent
    assert tally.total == PrivacyCost(0.5, 1e-7)  # unchecked
    tally.add("b", 0.75, 0.0)  # grown back to a cost: valid again
    assert tally.spent == PrivacyCost(1.25, 1e-7)
    tally.add("c", 0.0, 1.5, "charge 9")
    with pytest.raises(PrivacyError, match=r"^charge 9\.delta"):
        _ = tally.spent
    tally.remove("c")
    assert tally.spent == PrivacyCost(1.25, 1e-7)
    with pytest.raises(PrivacyError, match="finite"):
        tally.add("d", math.inf, 0.0, "charge 10")
    assert "d" not in tally
