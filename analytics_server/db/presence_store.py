"""Device presence (docs/scaling.md): a check-in at any process marks the device available until a time (and the
process holding its long-poll withdraws it when that connection closes early); the process forming a cohort
claims free devices with one conditional `UPDATE … RETURNING` (never seating a device twice) in the transaction
that stores the cohort and their assignments (`services.cohorts_service.form`); a device's assignment waits in its
presence row until its check-in reads it.

All times are unix seconds from the injected clock; the processes' clocks must agree to well within the lease TTL.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import and_, bindparam, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from analytics_server.db.base import Database, run_to_completion
from analytics_server.db.models import DevicePresence
from fa_common.clock import Clock

CHUNK = 500
"""Ids per `IN (…)` list (SQLite's bound-parameter limit)."""


class ClaimLost(Exception):
    """Some of a forming cohort's devices could not be claimed (another cohort took them first, or their
    availability lapsed). Nothing was written; `lost` names those devices."""

    def __init__(self, cohort_id: str, lost: Iterable[str]) -> None:
        self.lost = frozenset(lost)
        super().__init__(f"cohort {cohort_id}: {len(self.lost)} devices could not be claimed")


def chunks(ids: Sequence[str]) -> Iterable[list[str]]:
    """`ids` in lists of at most CHUNK."""
    for i in range(0, len(ids), CHUNK):
        yield list(ids[i:i + CHUNK])


@run_to_completion
class Presence:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def mark_available(self, rows: Sequence[tuple[str, float]]) -> None:
        """These devices checked in and may be seated until their `until` (a claim in progress is kept).
        One transaction for all of them; a device listed twice keeps its latest `until`."""
        latest: dict[str, float] = {}
        for device_id, until in rows:
            latest[device_id] = max(until, latest.get(device_id, until))
        ids = list(latest)
        async with self.db.tx() as s:
            for chunk in chunks(ids):
                ins = self.db.upsert()(DevicePresence).values(
                    [{"device_id": d, "available_until": latest[d], "cohort_id": None} for d in chunk])
                ins = ins.on_conflict_do_update(index_elements=["device_id"],
                                                set_={"available_until": ins.excluded.available_until})
                await s.execute(ins)

    async def withdraw_available(self, rows: Sequence[tuple[str, float]]) -> None:
        """These devices' check-in long-polls closed early (the client went away): each is no longer available,
        provided its availability is still the `until` that long-poll wrote — a later check-in (at this or any
        other process) has written another and keeps it. One statement for all of them (executemany)."""
        if not rows:
            return
        presence = DevicePresence.__table__
        async with self.db.tx() as s:
            await s.execute(
                update(presence)
                .where(presence.c.device_id == bindparam("b_device"), presence.c.available_until == bindparam("b_until"))
                .values(available_until=0.0),
                [{"b_device": d, "b_until": until} for d, until in rows],
            )

    async def of(self, device_ids: Sequence[str]) -> dict[str, tuple[str | None, dict[str, Any] | None]]:
        """Per device with a presence row: (cohort it is claimed for, its assignment once stored)."""
        out: dict[str, tuple[str | None, dict[str, Any] | None]] = {}
        async with self.db.sessions() as s:
            for chunk in chunks(list(dict.fromkeys(device_ids))):
                rows = await s.execute(
                    select(DevicePresence.device_id, DevicePresence.cohort_id, DevicePresence.assignment)
                    .where(DevicePresence.device_id.in_(chunk))
                )
                out.update({d: (c, a) for d, c, a in rows.all()})
        return out

    async def count_available(self) -> int:
        """How many devices are available and free (cheaper than listing them: no rows leave the database)."""
        now = self.clock.time()
        async with self.db.sessions() as s:
            return int((await s.execute(
                select(func.count()).select_from(DevicePresence)
                .where(DevicePresence.available_until > now, DevicePresence.cohort_id.is_(None))
            )).scalar_one())

    async def available(self) -> list[str]:
        """The devices available and free now."""
        now = self.clock.time()
        async with self.db.sessions() as s:
            rows = await s.execute(
                select(DevicePresence.device_id).where(DevicePresence.available_until > now, DevicePresence.cohort_id.is_(None))
            )
            return list(rows.scalars())

    async def claim(self, cohort_id: str, device_ids: Sequence[str]) -> list[str]:
        """Seat-claim on its own: the subset of `device_ids` still available and free, now marked with `cohort_id`
        (conditional UPDATE … RETURNING: two processes never claim one device). It names no stored cohort: the
        orchestrator claims in the transaction that stores the cohort (`services.cohorts_service.form`), and
        `Cohorts.release_abandoned` frees claims like these."""
        async with self.db.tx() as s:
            claimed = await self.claim_in(s, cohort_id, device_ids)
        order = {d: i for i, d in enumerate(device_ids)}
        return sorted(claimed, key=order.__getitem__)

    async def claim_in(self, s: AsyncSession, cohort_id: str, device_ids: Sequence[str]) -> list[str]:
        """Mark those of `device_ids` that are available and free as claimed by `cohort_id`, in the caller's
        transaction; the ones claimed."""
        now = self.clock.time()
        claimed: list[str] = []
        for chunk in chunks(device_ids):
            rows = await s.execute(
                update(DevicePresence)
                .where(DevicePresence.device_id.in_(chunk), DevicePresence.cohort_id.is_(None),
                       DevicePresence.available_until > now)
                .values(cohort_id=cohort_id, assignment=None)
                .returning(DevicePresence.device_id)
            )
            claimed += list(rows.scalars())
        return claimed

    async def release(self, cohort_id: str, device_ids: Sequence[str] | None = None) -> None:
        """Free devices claimed by `cohort_id` (all of them, or those listed: dropped from it). A freed device
        is not offered again until it checks in again."""
        async with self.db.tx() as s:
            await self.release_in(s, cohort_id, device_ids)

    async def release_in(self, s: AsyncSession, cohort_id: str, device_ids: Sequence[str] | None = None) -> None:
        """`release` in the caller's transaction."""
        cond = [DevicePresence.cohort_id == cohort_id]
        if device_ids is None:
            await s.execute(update(DevicePresence).where(*cond).values(cohort_id=None, assignment=None, available_until=0.0))
            return
        for chunk in chunks(list(device_ids)):
            await s.execute(
                update(DevicePresence).where(and_(*cond, DevicePresence.device_id.in_(chunk)))
                .values(cohort_id=None, assignment=None, available_until=0.0)
            )

    async def store_assignments(self, s: AsyncSession, cohort_id: str, assignments: dict[str, dict[str, Any]]) -> None:
        """Store each claimed member's assignment for delivery, in the caller's transaction: one statement for all
        members (executemany), not one compiled ORM UPDATE each."""
        presence = DevicePresence.__table__
        await s.execute(
            update(presence)
            .where(presence.c.device_id == bindparam("b_device"), presence.c.cohort_id == cohort_id)
            .values(assignment=bindparam("b_assignment", type_=presence.c.assignment.type)),
            [{"b_device": d, "b_assignment": a} for d, a in assignments.items()],
        )

    async def assignments_of_cohort(self, cohort_id: str) -> dict[str, dict[str, Any]]:
        async with self.db.sessions() as s:
            rows = await s.execute(
                select(DevicePresence.device_id, DevicePresence.assignment)
                .where(DevicePresence.cohort_id == cohort_id, DevicePresence.assignment.is_not(None))
            )
            return {d: a for d, a in rows.all()}

    async def assignments_for(self, device_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        async with self.db.sessions() as s:
            for chunk in chunks(device_ids):
                rows = await s.execute(
                    select(DevicePresence.device_id, DevicePresence.assignment)
                    .where(DevicePresence.device_id.in_(chunk), DevicePresence.cohort_id.is_not(None),
                           DevicePresence.assignment.is_not(None))
                )
                out.update({d: a for d, a in rows.all()})
        return out


__all__ = ["CHUNK", "ClaimLost", "Presence", "chunks"]
