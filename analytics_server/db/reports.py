"""Read-only reports for analysts and operators (the console's budget and fleet pages, `fa ls`, `fa budget`): pages
of queries, of a source's charges and of the sources with a budget, and the fleet's devices, cohorts and phase
durations.

Every report reads a bounded number of rows. Lists are read in pages by keyset (docs/server.md, "Paging"): a page
asks for the rows after the last key of the page before — queries by (created_at, id) newest first, charges by
id newest first, sources by name — so a walk over a long history costs one indexed range read per page and
sees no row twice while rows are added. The fleet report reads the newest `FLEET_EVENTS` cohort events. Phase
durations come from the stored `cohort.formed` / `cohort.phase` / `cohort.finished` /
`cohort.aborted` events, so they cover every server process sharing the database (the `/metrics`
histogram covers one process).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, tuple_, union

from analytics_server.db.base import Database, run_to_completion, utc
from analytics_server.db.models import (
    Cohort,
    Device,
    DevicePresence,
    Event,
    PrivacyBudget,
    PrivacyCharge,
    Query,
    Round,
    ServerProcess,
)
from fa_common.clock import Clock

FLEET_EVENTS = 5000
"""Most recent cohort events read for phase durations and abort reasons."""
RECENT_S = 3600.0
"""Window of the fleet report's "recent" cohort counts."""
_COHORT_EVENTS = ("cohort.formed", "cohort.phase", "cohort.finished", "cohort.aborted")
_PHASE_ORDER = ("advertise_keys", "share_keys", "masked_input", "consistency_check", "unmasking")


@dataclass(frozen=True)
class ChargeRow:
    """One query's charge against a source: `query_id` and `kind` only when the caller may see the query."""

    query_id: str | None
    kind: str | None
    name: str | None
    epsilon: float
    delta: float
    status: str
    charged_at: datetime
    refunded_at: datetime | None
    own: bool
    runs: int = 1
    charge_id: int = 0
    """The ledger row's id: the key charges are paged by."""


@dataclass(frozen=True)
class ViewRound:
    """What a query's status view shows of its current round (else, between rounds or finished, its last)."""

    index: int
    contributors: int
    need: int
    cohorts: dict[str, int]
    """cohort status → count"""


@dataclass(frozen=True)
class Page:
    """One page of a keyset walk: its rows, and whether rows follow (then the last row's key is the cursor)."""

    rows: list[Any]
    more: bool


@dataclass(frozen=True)
class PhaseStats:
    count: int
    mean_s: float
    p50_s: float
    p90_s: float
    max_s: float


@dataclass
class FleetReport:
    at: float
    devices_registered: int
    devices_available: int
    devices_in_cohorts: int
    checkins_total: int
    processes_live: int
    cohorts_total: dict[str, int]
    cohorts_recent: dict[str, int]
    abort_reasons: list[tuple[str, int]]
    phase_durations: dict[str, PhaseStats]
    cohorts_sampled: int
    queries_by_status: dict[str, int] = field(default_factory=dict)


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


def phase_durations(events: list[tuple[str | None, str, dict[str, Any], datetime]]) -> tuple[dict[str, PhaseStats], int]:
    """Per secagg phase, statistics of how long it was open: from the event that opened it (`cohort.formed`
    opens advertise_keys, `cohort.phase` the next one) to the cohort's next event. `events` are (cohort id,
    type, data, time) in any order; cohorts whose first event is outside the list are skipped (their first
    phase's start is unknown). Returns (stats by phase, cohorts seen)."""
    by_cohort: dict[str, list[tuple[datetime, str, dict[str, Any]]]] = {}
    for cohort_id, typ, data, at in events:
        if cohort_id:
            by_cohort.setdefault(cohort_id, []).append((at, typ, data or {}))
    samples: dict[str, list[float]] = {}
    seen = 0
    for rows in by_cohort.values():
        rows.sort(key=lambda r: r[0])
        if rows[0][1] != "cohort.formed":
            continue
        seen += 1
        phase, opened = "advertise_keys", rows[0][0]
        for at, typ, data in rows[1:]:
            samples.setdefault(phase, []).append(max(0.0, (at - opened).total_seconds()))
            if typ != "cohort.phase":
                break
            phase, opened = str(data.get("phase", "?")), at
    stats = {}
    for phase in sorted(samples, key=lambda p: _PHASE_ORDER.index(p) if p in _PHASE_ORDER else 99):
        xs = sorted(samples[phase])
        stats[phase] = PhaseStats(len(xs), sum(xs) / len(xs), _quantile(xs, 0.5), _quantile(xs, 0.9), xs[-1])
    return stats, seen


@run_to_completion
class Reports:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def budget_charges(self, source: str, viewer: int | None, limit: int = 1000,
                             before: int | None = None) -> list[ChargeRow]:
        """The newest `limit` charges of `source` (with `before`: of those with a smaller id), oldest first.
        `viewer` is the caller's token id (None: an admin, who sees every query): other analysts' charges
        appear without query id, kind or name."""
        return (await self.charge_page(source, viewer, limit, before)).rows

    async def charge_page(self, source: str, viewer: int | None, limit: int, before: int | None = None) -> Page:
        """`budget_charges` as a page of ChargeRow: `more` when older charges follow (the cursor is the first
        row's `charge_id`)."""
        stmt = (select(PrivacyCharge, Query.kind, Query.name, Query.created_by)
                .join(Query, Query.id == PrivacyCharge.query_id)
                .where(PrivacyCharge.source == source)
                .order_by(PrivacyCharge.id.desc())
                .limit(limit + 1))
        if before is not None:
            stmt = stmt.where(PrivacyCharge.id < before)
        async with self.db.sessions() as s:
            rows = (await s.execute(stmt)).all()
        more = len(rows) > limit
        out = []
        for charge, kind, name, created_by in reversed(rows[:limit]):
            own = viewer is None or created_by == viewer
            out.append(ChargeRow(
                charge.query_id if own else None, kind if own else None, name if own else None, charge.epsilon,
                charge.delta, charge.status, charge.created_at, charge.refunded_at, viewer is not None and own,
                charge.runs, charge.id,
            ))
        return Page(out, more)

    async def query_page(self, created_by: int | None, limit: int, after: tuple[datetime, str] | None = None) -> Page:
        """Queries newest first (by created_at, then id), `limit` of them after the key `after` (the last row
        of the page before); with `created_by`, only the queries that token submitted."""
        stmt = select(Query).order_by(Query.created_at.desc(), Query.id.desc()).limit(limit + 1)
        if created_by is not None:
            stmt = stmt.where(Query.created_by == created_by)
        if after is not None:
            at, qid = after
            stmt = stmt.where(tuple_(Query.created_at, Query.id) < tuple_(at, qid))  # a row value: an index range scan
        async with self.db.sessions() as s:
            rows = list((await s.execute(stmt)).scalars())
        return Page(rows[:limit], len(rows) > limit)

    async def view_rounds(self, queries: list[Query]) -> dict[str, ViewRound | None]:
        """For each query, its status view's round (the current one, else the one before) with its cohorts by
        status, in two reads for the whole page (None: no round yet)."""
        wanted = [(q.id, q.current_round) for q in queries] + [(q.id, q.current_round - 1) for q in queries
                                                               if q.current_round > 0]
        if not wanted:
            return {}
        async with self.db.sessions() as s:
            rounds = (await s.execute(
                select(Round.query_id, Round.index, Round.id, Round.contributors, Round.need)
                .where(tuple_(Round.query_id, Round.index).in_(wanted))
            )).all()
            by_key = {(qid, index): (rid, contributors, need) for qid, index, rid, contributors, need in rounds}
            chosen: dict[str, tuple[int, int, int, int]] = {}
            for q in queries:
                for index in (q.current_round, q.current_round - 1):
                    hit = by_key.get((q.id, index))
                    if hit is not None:
                        chosen[q.id] = (index, *hit)
                        break
                    if index <= 0:
                        break
            counts: dict[int, dict[str, int]] = {}
            round_ids = [rid for _, rid, _, _ in chosen.values()]
            if round_ids:
                for rid, status, n in (await s.execute(
                    select(Cohort.round_id, Cohort.status, func.count())
                    .where(Cohort.round_id.in_(round_ids)).group_by(Cohort.round_id, Cohort.status)
                )).all():
                    counts.setdefault(rid, {})[status] = int(n)
        out: dict[str, ViewRound | None] = {q.id: None for q in queries}
        for qid, (index, rid, contributors, need) in chosen.items():
            out[qid] = ViewRound(index, contributors, need, counts.get(rid, {}))
        return out

    async def budget_source_page(self, limit: int, after: str | None = None) -> Page:
        """Names of the sources with an admin-set total or a charge, by name, `limit` of them after `after`."""
        configured = select(PrivacyBudget.source.label("source"))
        charged = select(PrivacyCharge.source.label("source"))
        if after is not None:
            configured = configured.where(PrivacyBudget.source > after)
            charged = charged.where(PrivacyCharge.source > after)
        names = union(configured, charged).subquery()
        stmt = select(names.c.source).order_by(names.c.source).limit(limit + 1)
        async with self.db.sessions() as s:
            rows = list((await s.execute(stmt)).scalars())
        return Page(rows[:limit], len(rows) > limit)

    async def fleet_report(self, lease_ttl_s: float, own_checkins: int) -> FleetReport:
        """Devices, check-ins (summed over live processes' last heartbeats; this process's own count when it is
        higher), cohorts by outcome (all time and the last hour), abort reasons and phase durations of the
        cohorts in the newest FLEET_EVENTS events."""
        now = self.clock.time()
        since = utc(self.clock) - timedelta(seconds=RECENT_S)
        async with self.db.sessions() as s:
            registered = (await s.execute(select(func.count()).select_from(Device))).scalar_one()
            available = (await s.execute(
                select(func.count()).select_from(DevicePresence)
                .where(DevicePresence.available_until > now, DevicePresence.cohort_id.is_(None))
            )).scalar_one()
            seated = (await s.execute(
                select(func.count()).select_from(DevicePresence).where(DevicePresence.cohort_id.is_not(None))
            )).scalar_one()
            total = dict((await s.execute(select(Cohort.status, func.count()).group_by(Cohort.status))).all())
            recent = dict((await s.execute(
                select(Cohort.status, func.count()).where(Cohort.created_at >= since).group_by(Cohort.status)
            )).all())
            reasons = (await s.execute(
                select(Cohort.reason, func.count()).where(Cohort.status == "aborted", Cohort.created_at >= since)
                .group_by(Cohort.reason).order_by(func.count().desc()).limit(10)
            )).all()
            procs = (await s.execute(
                select(ServerProcess.load).where(ServerProcess.stopped.is_(False),
                                                 ServerProcess.heartbeat_at > now - lease_ttl_s)
            )).scalars().all()
            events = (await s.execute(
                select(Event.cohort_id, Event.type, Event.data, Event.created_at)
                .where(Event.type.in_(_COHORT_EVENTS))
                .order_by(Event.id.desc()).limit(FLEET_EVENTS)
            )).all()
            by_status = dict((await s.execute(select(Query.status, func.count()).group_by(Query.status))).all())
        checkins = sum(int((load or {}).get("checkins", 0)) for load in procs)
        stats, sampled = phase_durations([tuple(e) for e in events])
        return FleetReport(
            at=now,
            devices_registered=int(registered),
            devices_available=int(available),
            devices_in_cohorts=int(seated),
            checkins_total=max(checkins, own_checkins) if len(procs) <= 1 else checkins,
            processes_live=len(procs),
            cohorts_total={k: int(v) for k, v in total.items()},
            cohorts_recent={k: int(v) for k, v in recent.items()},
            abort_reasons=[(r or "unknown", int(n)) for r, n in reasons],
            phase_durations=stats,
            cohorts_sampled=sampled,
            queries_by_status={k: int(v) for k, v in by_status.items()},
        )


__all__ = ["ChargeRow", "FleetReport", "Page", "PhaseStats", "Reports", "ViewRound", "phase_durations"]
