"""A query's life as units of work: submitted (limits, budget, row, charge, log entries and event in one transaction),
moved to another status (an ended query's refund decision), finished with its release (logged); and an analyst's
quota state.

Privacy charges, and the per-analyst quota and active-query cap checked with them, hold database locks
(`source:<name>`, `analyst:<token id>`, and `log` for the appends: `BEGIN IMMEDIATE` on SQLite, `SELECT … FOR
UPDATE` on PostgreSQL), so two server processes on one database cannot both spend the last of a budget.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from analytics_server.db.base import epoch_ms, shielded
from analytics_server.db.models import Query
from analytics_server.db.query_store import TERMINAL
from analytics_server.db.store import Store
from analytics_server.db.translog_store import LOG_LOCK
from analytics_server.logs import fields
from queries.dp.ledger import Budget, PrivacyCost
from queries.dp.limits import AnalystLimits, AnalystUsage, Refund, analyst_usage, check_analyst, refund_decision
from translog import entries as te

log = logging.getLogger(__name__)
REFUNDABLE = ("cancelled", "failed")
"""Statuses whose query may get its charge back (when no masked input was seen)."""


@shielded
async def submit(
    store: Store,
    kind: str,
    name: str | None,
    source: str,
    spec: dict[str, Any],
    state: dict[str, Any],
    rounds_upper_bound: int,
    calibration: dict[str, Any] | None,
    created_by: int | None,
    cost: PrivacyCost | None = None,
    default_budget: Budget | None = None,
    limits: AnalystLimits | None = None,
) -> Query:
    """Insert the query; with a `cost`, charge it to the source's budget in the same transaction.

    The check (spent + cost ≤ total, basic composition) and the charge happen inside one transaction holding the
    database lock of the source (and, with `limits`, of the analyst `created_by`), so two concurrent submits cannot
    both pass, even from two server processes. Raises ActiveQueryLimit, AnalystQuotaExceeded or dp.BudgetExceeded
    (messages name the limit and what remains) and inserts nothing when the query does not fit."""
    if cost is not None and default_budget is None:
        raise ValueError("default_budget: required when charging a cost")
    analyst = created_by if limits is not None else None
    locks = ([f"source:{source}"] if cost is not None else []) + ([f"analyst:{analyst}"] if analyst is not None else [])
    async with store.db.tx([*locks, LOG_LOCK]) as s:
        if analyst is not None:
            assert limits is not None
            own, used, active = await store.tokens.holdings(s, analyst, limits.window_start(store.clock.time()))
            check_analyst(analyst_usage(analyst, own, used, active, limits), cost)
        if cost is not None:
            assert default_budget is not None
            ledger = await store.budgets.ledger(s, source, default_budget)
            ledger.budget.check(ledger.spent, cost)  # raises BudgetExceeded → the transaction rolls back
        q = await store.queries.insert(s, kind, name, source, spec, state, rounds_upper_bound, calibration, created_by)
        if cost is not None:
            await store.budgets.charge(s, source, q.id, cost)
        at = epoch_ms(store.clock)
        await store.log.append(s, [te.query_entry(q.id, source, kind, spec, at)] + (
            [te.charge_entry(q.id, source, cost.epsilon, cost.delta, at)] if cost is not None else []))
        data: dict[str, Any] = {"kind": kind}
        if cost is not None:
            data["charged"] = cost.to_dict()
        await store.events.add(s, "query.submitted", data, query_id=q.id)
    return q


async def usage(store: Store, token_id: int, limits: AnalystLimits) -> AnalystUsage:
    """The analyst token's quota state (what `GET /v1/quota` shows and a submit checks)."""
    own, used, active = await store.tokens.read_holdings(token_id, limits.window_start(store.clock.time()))
    return analyst_usage(token_id, own, used, active, limits)


@shielded
async def set_status(store: Store, query_id: str, status: str, error: str | None = None) -> bool:
    """Move a non-terminal query to `status`; False when it was already terminal. A cancelled or failed query's
    charge is refunded in the same transaction iff none of its cohorts closed a masked-input phase
    (`refund_decision`), and the refund is logged."""
    async with store.db.tx([LOG_LOCK] if status in REFUNDABLE else []) as s:
        changed = await store.queries.set_status(s, query_id, status, error)
        charge = await _refund_if_unseen(store, s, query_id) if changed and status in REFUNDABLE else None
    if changed and status in TERMINAL:
        await _log_ended(store, query_id, status, error, charge)
    return changed


@shielded
async def finish(
    store: Store, query_id: str, result: dict[str, Any], privacy: dict[str, Any],
    uncertainty: dict[str, Any] | None = None, warnings: list[dict[str, Any]] | None = None,
    failure: str | None = None,
) -> bool:
    """Store the release and log it; the query succeeds, or — with `failure` (e.g. training diverged) — fails with
    that error while its result stays readable. A failed query's charge stays (its cohorts saw masked inputs)."""
    status = "failed" if failure else "succeeded"
    async with store.db.tx([LOG_LOCK]) as s:
        done = await store.queries.store_release(s, query_id, status, result, privacy, uncertainty, warnings, failure)
        charge = None
        if done:
            await store.log.append(s, [te.release_entry(query_id, status, result, privacy, epoch_ms(store.clock))])
            if failure:
                charge = await _refund_if_unseen(store, s, query_id)
    if done:
        await _log_ended(store, query_id, status, failure, charge)
    return done


async def _refund_if_unseen(store: Store, s: AsyncSession, query_id: str) -> str | None:
    """Apply `refund_decision` to the ended query in transaction `s`: refund and log its charges, or record that
    they stay. Returns "refunded", "kept" or None (no charge)."""
    seen = await store.cohorts.seen_in(s, query_id)
    charges = await store.budgets.charges_of(s, query_id)
    decision = refund_decision(seen, len(charges))
    if decision is Refund.KEEP:
        await store.events.add(s, "budget.kept", {"reason": f"masked inputs of {seen} cohort(s) were closed"},
                               query_id=query_id)
        return Refund.KEEP.value
    if decision is Refund.REFUND:
        await store.budgets.refund(s, query_id)
        at = epoch_ms(store.clock)
        await store.log.append(s, [te.charge_entry(query_id, c.source, c.epsilon, c.delta, at, refund=True)
                                    for c in charges])
        await store.events.add(s, "budget.refunded", {}, query_id=query_id)
        return Refund.REFUND.value
    return None


async def _log_ended(store: Store, query_id: str, status: str, error: str | None, charge: str | None = None) -> None:
    """INFO line for a query that reached a terminal status (after the transaction that ended it)."""
    q = await store.queries.get(query_id)
    took = (q.finished_at - q.created_at).total_seconds() if q is not None and q.finished_at else None
    rounds = q.current_round if q is not None else None
    info = fields(event=f"query.{status}", query_id=query_id, status=status, error=error, seconds=took,
                  rounds=rounds, charge=charge)
    note = {"refunded": "; its privacy charge was refunded",
            "kept": "; its privacy charge stays (masked inputs were seen)"}.get(charge or "", "")
    duration = f" after {took:.1f} s" if took is not None else ""
    if status == "failed":
        log.warning("query %s failed%s: %s%s", query_id, duration, error, note, extra=info)
    else:
        log.info("query %s %s%s (%s rounds)%s", query_id, status, duration, rounds, note, extra=info)


__all__ = ["REFUNDABLE", "finish", "set_status", "submit", "usage"]
