"""Cohorts and their seats: stored when formed, moved through the secagg phases, finished (the sum added to its
round in the same transaction) or aborted (the seats freed), and the clean-up of cohorts dead processes left.

A cohort's sum is stored and its masked-input phase closed only while its query is live and, with an owner, leased
by that process (`Queries.live_locked`): a process that lost its lease is fenced off. Forming a cohort (claims,
its task's log entry, the rows) is one transaction run by `services.cohorts_service`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from sqlalchemy import delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from analytics_server.db.base import Database, rowcount, run_to_completion, utc
from analytics_server.db.models import Cohort, CohortMember, DevicePresence, Event, Query, Round, ServerProcess
from analytics_server.db.presence_store import Presence
from analytics_server.db.query_store import TERMINAL, Queries, QueryNotLive
from analytics_server.db.round_store import vec_from_bytes, vec_to_bytes
from fa_common.clock import Clock
from secagg.phases import Phase


@run_to_completion
class Cohorts:
    def __init__(self, db: Database, clock: Clock, queries: Queries, presence: Presence) -> None:
        self.db = db
        self.clock = clock
        self.queries = queries
        self.presence = presence

    async def insert(self, s: AsyncSession, cohort_id: str, query_id: str, round_id: int, secagg: dict[str, Any],
                     mode: str, members: dict[str, int], phase: int, owner: str | None) -> None:
        """The cohort's row (running in `phase`, run by process `owner`), its seats and its `cohort.formed` event, in
        the caller's transaction; IntegrityError if a device already has a seat in this round."""
        at = utc(self.clock)
        s.add(Cohort(id=cohort_id, query_id=query_id, round_id=round_id, status="running", n=len(members),
                     secagg=secagg, mode=mode, phase=int(phase), contributors=0, created_at=at, owner=owner))
        await s.flush()
        await s.execute(
            insert(CohortMember),
            [{"cohort_id": cohort_id, "round_id": round_id, "device_id": d, "party": p, "contributed": False}
             for d, p in members.items()],
        )
        s.add(Event(query_id=query_id, cohort_id=cohort_id, type="cohort.formed", data={"n": len(members)}, created_at=at))

    async def mark_masked_input_closed(self, cohort_id: str, owner: str | None = None) -> None:
        """Record, before the next phase's messages go out, that the cohort's masked-input phase closed.

        Raises QueryNotLive (and records nothing) when the query is terminal or, with `owner`, leased by another
        process. The query's row is locked first, so this and a cancellation's refund decision (another
        process's status change) are ordered: a cancel that refunded is never followed by a closed phase."""
        async with self.db.tx() as s:
            c = await s.get(Cohort, cohort_id)
            if c is None:
                raise QueryNotLive(f"cohort {cohort_id} is gone")
            await self.queries.live_locked(s, c.query_id, owner)
            await s.execute(update(Cohort).where(Cohort.id == cohort_id).values(masked_input_closed=True))

    async def set_phase(self, cohort_id: str, phase: int) -> None:
        """Record that a running cohort opened `phase` (its row and a `cohort.phase` event)."""
        async with self.db.tx() as s:
            c = await s.get(Cohort, cohort_id)
            if c is None or c.status != "running":
                return
            c.phase = int(phase)
            s.add(Event(query_id=c.query_id, cohort_id=cohort_id, type="cohort.phase",
                        data={"phase": Phase(phase).label}, created_at=utc(self.clock)))

    async def abort(self, cohort_id: str, reason: str, phase: int | None = None, keep_seats: bool = False) -> None:
        """Record the abort and free the seats so the devices may join another cohort of the round.

        `phase` is the phase that could not complete; without it the cohort keeps the last phase recorded.
        `keep_seats`: the members keep their seats in the round (not contributed) and so never join another
        cohort of it — for a cohort whose sum the server already unmasked (a detected cheat): its devices'
        data must not enter a second sum of the same round."""
        async with self.db.tx() as s:
            c = await s.get(Cohort, cohort_id)
            if c is None or c.status != "running":
                return
            c.status, c.reason, c.finished_at = "aborted", reason, utc(self.clock)
            if phase is not None:
                c.phase = int(phase)
            if not keep_seats:
                await s.execute(delete(CohortMember).where(CohortMember.cohort_id == cohort_id))
            await self.presence.release_in(s, cohort_id)
            s.add(Event(query_id=c.query_id, cohort_id=cohort_id, type="cohort.aborted",
                        data={"reason": reason, "phase": Phase(c.phase).label}, created_at=utc(self.clock)))

    async def query_of(self, cohort_id: str) -> tuple[str, str] | None:
        """(query id, source) of a stored cohort; None if there is no such cohort."""
        async with self.db.sessions() as s:
            row = (await s.execute(select(Query.id, Query.source).join(Cohort, Cohort.query_id == Query.id)
                                   .where(Cohort.id == cohort_id))).first()
        return None if row is None else (row[0], row[1])

    async def running_locked(self, s: AsyncSession, cohort_id: str) -> Cohort | None:
        """The cohort's row if it is still running, read in the caller's transaction."""
        c = await s.get(Cohort, cohort_id)
        return c if c is not None and c.status == "running" else None

    async def abort_in(self, s: AsyncSession, c: Cohort, reason: str, phase: int, free: Iterable[str],
                       data: dict[str, Any]) -> None:
        """Abort the running cohort `c` in the caller's transaction: the members in `free` lose their seat (the
        others keep it), every claim of the cohort is released, and its `cohort.aborted` event carries `data`."""
        at = utc(self.clock)
        c.status, c.reason, c.finished_at, c.phase = "aborted", reason, at, int(phase)
        freed = sorted(free)
        if freed:
            await s.execute(delete(CohortMember).where(CohortMember.cohort_id == c.id, CohortMember.device_id.in_(freed)))
        await self.presence.release_in(s, c.id)
        s.add(Event(query_id=c.query_id, cohort_id=c.id, type="cohort.aborted", created_at=at,
                    data={"reason": reason, "phase": Phase(phase).label, **data}))

    async def members_in(self, s: AsyncSession, cohort_id: str) -> set[str]:
        """The devices seated in the cohort, read in the caller's transaction."""
        return set((await s.execute(select(CohortMember.device_id).where(CohortMember.cohort_id == cohort_id))).scalars())

    async def finish(
        self, cohort_id: str, total: np.ndarray, contributor_parties: Iterable[int], dropped: dict[str, list[int]],
        owner: str | None = None,
    ) -> None:
        """Atomically: cohort finished with its sum, seats marked, sum and count added to the round, devices
        freed. QueryNotLive when the query is terminal or (with `owner`) its lease passed to another process."""
        parties = sorted(contributor_parties)
        async with self.db.tx() as s:
            c = await s.get(Cohort, cohort_id)
            if c is None or c.status != "running":
                raise QueryNotLive(f"cohort {cohort_id} is {c.status if c else 'gone'}; its sum is not stored")
            await self.queries.live_locked(s, c.query_id, owner)  # no sum for a dead query or a lost lease
            r = await s.get(Round, c.round_id)
            assert r is not None
            agg = vec_from_bytes(r.aggregate)
            if agg.shape != total.shape:
                raise RuntimeError(f"cohort {cohort_id}: sum has shape {total.shape}, round expects {agg.shape}")
            at = utc(self.clock)
            r.aggregate = vec_to_bytes(agg + total)
            r.contributors = r.contributors + len(parties)
            c.status, c.sum, c.contributors, c.dropped, c.finished_at = "finished", vec_to_bytes(total), len(parties), dropped, at
            c.phase = int(Phase.DONE)
            c.masked_input_closed = True
            await self.presence.release_in(s, cohort_id)
            if parties:
                await s.execute(
                    update(CohortMember)
                    .where(CohortMember.cohort_id == cohort_id, CohortMember.party.in_(parties))
                    .values(contributed=True)
                )
            s.add(Event(query_id=c.query_id, cohort_id=cohort_id, type="cohort.finished",
                        data={"contributors": len(parties)}, created_at=at))

    async def of_round(self, round_id: int) -> list[Cohort]:
        async with self.db.sessions() as s:
            return list((await s.execute(select(Cohort).where(Cohort.round_id == round_id))).scalars())

    async def seen_in(self, s: AsyncSession, query_id: str) -> int:
        """How many of the query's cohorts closed a masked-input phase (finished ones included), read in the
        caller's transaction."""
        return int((await s.execute(
            select(func.count()).select_from(Cohort).where(
                Cohort.query_id == query_id, or_(Cohort.masked_input_closed.is_(True), Cohort.status == "finished"))
        )).scalar_one())

    async def abort_running(self, reason: str, query_id: str | None = None, keep_owner: str | None = None) -> int:
        """Abort cohorts still marked running whose process is gone: all of them (the single-process server
        at startup) or, with `query_id`, those of one query not run by `keep_owner` (a lease takeover)."""
        stmt = select(Cohort.id).where(Cohort.status == "running")
        if query_id is not None:
            stmt = stmt.where(Cohort.query_id == query_id)
        if keep_owner is not None:
            stmt = stmt.where(or_(Cohort.owner.is_(None), Cohort.owner != keep_owner))
        async with self.db.sessions() as s:
            ids = list((await s.execute(stmt)).scalars())
        for cid in ids:
            await self.abort(cid, reason)
        return len(ids)

    async def release_abandoned(self, ttl: float) -> tuple[int, int]:
        """Free the devices dead processes left claimed; (cohorts aborted, claims released).

        Cohorts still running whose query ended while their process was not live (no heartbeat within `ttl`):
        nobody takes such a query over, and they can never store a sum; they are aborted. Claims naming no running
        cohort (left by a server version that claimed before storing the cohort and died in between) are released,
        keeping the device's availability: it never learnt of the claim. Safe beside live processes: their claims
        commit together with their running cohort (`services.cohorts_service.create_cohort(claim=True)`), so neither
        is ever seen without the other, and their own cohorts are left to them."""
        t = self.clock.time()
        live = select(ServerProcess.id).where(ServerProcess.stopped.is_(False), ServerProcess.heartbeat_at > t - ttl)
        async with self.db.sessions() as s:
            ended = list((await s.execute(
                select(Cohort.id).join(Query, Query.id == Cohort.query_id)
                .where(Cohort.status == "running", Query.status.in_(TERMINAL),
                       or_(Cohort.owner.is_(None), Cohort.owner.not_in(live)))
            )).scalars())
        for cid in ended:
            await self.abort(cid, "its server process is gone")
        running = select(Cohort.id).where(Cohort.id == DevicePresence.cohort_id, Cohort.status == "running")
        async with self.db.tx() as s:
            res = await s.execute(
                update(DevicePresence).where(DevicePresence.cohort_id.is_not(None), ~running.exists())
                .values(cohort_id=None, assignment=None)
            )
        return len(ended), rowcount(res)

    async def route(self, cohort_id: str) -> tuple[str, str | None] | None:
        """(status, URL of the owning process) of a stored cohort; None if there is no such cohort."""
        async with self.db.sessions() as s:
            row = (await s.execute(
                select(Cohort.status, ServerProcess.url).outerjoin(ServerProcess, ServerProcess.id == Cohort.owner)
                .where(Cohort.id == cohort_id)
            )).first()
        return None if row is None else (row[0], row[1])


__all__ = ["Cohorts"]
