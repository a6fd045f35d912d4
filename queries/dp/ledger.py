"""Privacy-budget math for the per-source ledger and the server's privacy policy (storage is the server's).

Ledger semantics: every source has a total (ε, δ). A query is charged its target (ε, δ) when it is
submitted (it may run all its rounds); the charge is composed with what the source already spent and the
query is refused (`BudgetExceeded`, message with the remaining budget) if the result exceeds the total.
Composition is *basic* (ε and δ add up; Dwork–Roth Thm 3.16): valid for any mix of mechanisms, δ's and
accountants, and simple to reproduce from stored rows. It overstates the cost of many small queries;
`compose_rdp` gives the tighter RDP composition for queries calibrated by this library (same accountant
as their calibration) — a ledger that stores each query's calibration can use it instead. `RunningSpend` keeps
the basic composition of a changing set of charges as an exact running sum (O(1) per charge or refund).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from typing import TYPE_CHECKING, cast

import numpy as np

from queries.dp.errors import BudgetExceeded, PrivacyError

if TYPE_CHECKING:  # the accountant (dp_accounting, scipy) loads only when a composition is computed
    from queries.dp.calibrate import QueryCalibration

TOLERANCE = 1e-9
"""Relative slack when comparing a composed cost with the budget (float sums of stored values)."""


@dataclass(frozen=True)
class PrivacyCost:
    epsilon: float
    delta: float

    def to_dict(self) -> dict[str, float]:
        return {"epsilon": self.epsilon, "delta": self.delta}


CostLike = PrivacyCost | tuple[float, float]


def _cost(c: CostLike, name: str = "cost") -> PrivacyCost:
    eps, delta = (c.epsilon, c.delta) if isinstance(c, PrivacyCost) else c
    if not (math.isfinite(eps) and eps >= 0):
        raise PrivacyError(f"{name}.epsilon: must be a finite number ≥ 0, got {eps!r}")
    if not (0 <= delta < 1):
        raise PrivacyError(f"{name}.delta: must be in [0, 1), got {delta!r}")
    return PrivacyCost(float(eps), float(delta))


def compose_costs(costs: Iterable[CostLike]) -> PrivacyCost:
    """Basic composition: (Σε, Σδ)."""
    eps = delta = 0.0
    for i, c in enumerate(costs):
        cost = _cost(c, f"costs[{i}]")
        eps += cost.epsilon
        delta += cost.delta
    return PrivacyCost(eps, delta)


_SCALE_BITS = 1074
"""Every finite double is an integer multiple of 2^-1074: scaled by 2^1074, sums of them are exact integers."""


def _scaled(x: float) -> int:
    num, den = x.as_integer_ratio()  # den is a power of two ≤ 2^1074
    return num << (_SCALE_BITS - (den.bit_length() - 1))


def _unscaled(n: int) -> float:
    try:
        return n / (1 << _SCALE_BITS)  # int / int is correctly rounded
    except OverflowError:
        return math.inf if n > 0 else -math.inf


class RunningSpend:
    """Basic composition of a changing set of charges, kept as a running sum: adding, growing or removing a
    charge costs O(1) instead of re-adding every earlier one (an auditor walking a long log checks the spend at
    every charge). The sums are exact (integers in units of 2^-1074), so removals leave no rounding drift and
    `spent` is Σε, Σδ correctly rounded whatever the order of the changes.

    Each charge has a key and a name (used in messages). A charge whose amounts are no cost (ε < 0, δ outside
    [0, 1)) makes `spent` raise PrivacyError naming it, as `compose_costs` would, until it is removed."""

    def __init__(self) -> None:
        self._rows: dict[object, tuple[int, int, str]] = {}
        self._eps = 0
        self._delta = 0
        self._invalid: dict[object, str] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def add(self, key: object, epsilon: float, delta: float, name: str = "cost") -> None:
        """Charge (ε, δ) under `key`: a new charge, or more of an existing one (its amounts grow)."""
        if not (math.isfinite(epsilon) and math.isfinite(delta)):
            raise PrivacyError(f"{name}: amounts must be finite, got epsilon={epsilon!r}, delta={delta!r}")
        e, d = _scaled(float(epsilon)), _scaled(float(delta))
        old_e, old_d, first_name = self._rows.get(key, (0, 0, name))
        self._rows[key] = (old_e + e, old_d + d, first_name)
        self._eps += e
        self._delta += d
        self._revalidate(key)

    def remove(self, key: object) -> None:
        """Take the charge `key` out (a refund); nothing if there is no such charge."""
        row = self._rows.pop(key, None)
        if row is not None:
            self._eps -= row[0]
            self._delta -= row[1]
            self._invalid.pop(key, None)

    def _revalidate(self, key: object) -> None:
        e, d, name = self._rows[key]
        try:
            _cost((_unscaled(e), _unscaled(d)), name)
        except PrivacyError as exc:
            self._invalid[key] = str(exc)
        else:
            self._invalid.pop(key, None)

    @property
    def spent(self) -> PrivacyCost:
        """(Σε, Σδ) of the charges held; PrivacyError naming a charge whose amounts are no cost."""
        if self._invalid:
            raise PrivacyError(next(iter(self._invalid.values())))
        return PrivacyCost(_unscaled(self._eps), _unscaled(self._delta))

    @property
    def total(self) -> PrivacyCost:
        """(Σε, Σδ) of the charges held, valid or not (no check)."""
        return PrivacyCost(_unscaled(self._eps), _unscaled(self._delta))


def compose_rdp(queries: Sequence[tuple[QueryCalibration, int]], delta: float) -> float:
    """ε at δ of several calibrated queries with their rounds run, composed with RDP (tighter than basic)."""
    if not 0 < delta < 1:
        raise PrivacyError(f"delta: must be in (0, 1), got {delta!r}")
    from queries.dp import rdp

    curve = np.zeros(len(rdp.ORDERS))
    for cal, rounds_run in queries:
        curve = curve + cal.rdp_curve(rounds_run)
    return rdp.epsilon_of_curve(curve, delta) if np.any(curve > 0) else 0.0


@dataclass(frozen=True)
class Budget:
    """A source's total (ε, δ)."""

    total_epsilon: float
    total_delta: float

    def __post_init__(self) -> None:
        _cost((self.total_epsilon, self.total_delta), "budget")

    def remaining(self, spent: CostLike | Sequence[CostLike]) -> PrivacyCost:
        s = _spent(spent)
        return PrivacyCost(max(0.0, self.total_epsilon - s.epsilon), max(0.0, self.total_delta - s.delta))

    def check(self, spent: CostLike | Sequence[CostLike], new: CostLike) -> PrivacyCost:
        """Remaining budget after charging `new` on top of `spent`; raises BudgetExceeded if it does not fit."""
        s = _spent(spent)
        n = _cost(new, "privacy")
        eps, delta = s.epsilon + n.epsilon, s.delta + n.delta
        over_eps = eps > self.total_epsilon * (1 + TOLERANCE)
        over_delta = delta > self.total_delta * (1 + TOLERANCE)
        if over_eps or over_delta:
            left = self.remaining(s)
            what = "epsilon" if over_eps else "delta"
            raise BudgetExceeded(
                f"privacy.{what}: the query costs (epsilon={n.epsilon:g}, delta={n.delta:g}) but the source's budget "
                f"has only (epsilon={left.epsilon:g}, delta={left.delta:g}) remaining of "
                f"(epsilon={self.total_epsilon:g}, delta={self.total_delta:g})",
                left.epsilon,
                left.delta,
            )
        return PrivacyCost(max(0.0, self.total_epsilon - eps), max(0.0, self.total_delta - delta))


def _spent(spent: CostLike | Sequence[CostLike]) -> PrivacyCost:
    if isinstance(spent, PrivacyCost):
        return spent
    if isinstance(spent, tuple) and len(spent) == 2:
        first, second = spent
        if isinstance(first, (int, float)) and isinstance(second, (int, float)):
            return _cost((first, second), "spent")
    # not a (ε, δ) pair of numbers, so a sequence of costs (a tuple[float, float] cannot reach here)
    return compose_costs(cast(Sequence[CostLike], spent))


@dataclass(frozen=True)
class PrivacyPolicy:
    """Server policy: refuse queries without noise and/or above a maximum (ε, δ) per query, and (with
    `allow_server_trusted` off) kinds whose own guarantee does not hold against the server.

    Off (all None/False, server-trusted kinds allowed) in the demo profile; production sets
    require_noise=True, caps and allow_server_trusted=False."""

    require_noise: bool = False
    max_epsilon: float | None = None
    max_delta: float | None = None
    allow_server_trusted: bool = True
    """Admit a guarantee that assumes an honest server (TrieHH's sampling and thresholding, no noise)."""

    def check(self, mechanism: str, epsilon: float | None, delta: float | None) -> None:
        if mechanism == "none" or epsilon is None:
            if self.require_noise:
                raise PrivacyError(
                    "privacy.mechanism: this server requires differential privacy; "
                    "use 'discrete_gaussian' or 'skellam' with epsilon and delta"
                )
            return
        if self.max_epsilon is not None and epsilon > self.max_epsilon:
            raise PrivacyError(f"privacy.epsilon: {epsilon:g} exceeds this server's maximum of {self.max_epsilon:g} per query")
        if self.max_delta is not None and delta is not None and delta > self.max_delta:
            raise PrivacyError(f"privacy.delta: {delta:g} exceeds this server's maximum of {self.max_delta:g} per query")
