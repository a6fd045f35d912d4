"""Forming a cohort as one transaction: its members claimed (all of them or nothing, only while the query is live
and leased by the forming process), its task logged (transparency log), its row, seats and the members'
assignments stored — so a process that dies at any step leaves either nothing or a running cohort that a takeover
aborts."""

from __future__ import annotations

from typing import Any

from analytics_server.db.base import epoch_ms, shielded
from analytics_server.db.presence_store import ClaimLost
from analytics_server.db.store import Store
from analytics_server.db.translog_store import LOG_LOCK
from secagg.phases import Phase
from translog import entries as te

FORMATION_STEPS = ("before_claims", "claimed", "logged", "cohort_row", "committed")
"""The steps of storing a forming cohort (`create_cohort` with `claim`) at which `Store.fault_hook` is called: before
its transaction, after the claims, after the task's log entry, after the cohort's row, seats and assignments (all
three inside the transaction), and after the commit."""


@shielded
async def create_cohort(
    store: Store,
    cohort_id: str,
    query_id: str,
    round_id: int,
    secagg: dict[str, Any],
    mode: str,
    members: dict[str, int],
    phase: int = Phase.ADVERTISE_KEYS,
    owner: str | None = None,
    assignments: dict[str, dict[str, Any]] | None = None,
    task: tuple[int, bytes, dict[str, Any]] | None = None,
    claim: bool = False,
) -> None:
    """Insert the cohort (open in `phase`, run by process `owner`) and its seats, and store each member's
    assignment for delivery; with `task` (round index, task digest, the config's `public_summary`) log the
    cohort's task first (docs/transparency.md); IntegrityError if a device already has a seat in this round.

    `claim`: a forming cohort. Its members are claimed in the same transaction, all of them or nothing
    (ClaimLost naming those another cohort took or whose availability lapsed), and only while the query is live
    and leased by `owner` (QueryNotLive): the claims and the cohort they name commit together."""
    if claim:
        store.fault("before_claims")
    async with store.db.tx([LOG_LOCK] if task is not None else []) as s:
        if claim:
            await store.queries.live_locked(s, query_id, owner)  # a process that lost the lease seats nobody
            claimed = await store.presence.claim_in(s, cohort_id, list(members))
            if len(claimed) < len(members):
                raise ClaimLost(cohort_id, set(members).difference(claimed))  # rolls the claims back
            store.fault("claimed")
        if task is not None:
            await store.log.append(s, [te.task_entry(query_id, task[0], cohort_id, task[1], epoch_ms(store.clock),
                                                      task[2])])
        if claim:
            store.fault("logged")
        await store.cohorts.insert(s, cohort_id, query_id, round_id, secagg, mode, members, phase, owner)
        if assignments:
            await store.presence.store_assignments(s, cohort_id, assignments)
        if claim:
            await s.flush()
            store.fault("cohort_row")
    if claim:
        store.fault("committed")


__all__ = ["FORMATION_STEPS", "create_cohort"]
