"""A query's rounds: created with their plan and an all-zero aggregate, decoded into the query's state (one
transaction), their sampling secret, and who sat in them and contributed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import select, update

from analytics_server.db.base import Database, run_to_completion, utc
from analytics_server.db.models import CohortMember, Event, Query, Round
from fa_common.clock import Clock

if TYPE_CHECKING:
    from queries.dp import PlannedNoise  # at run time on first use: it loads the accountant (docs/server.md)


def vec_to_bytes(vec: np.ndarray) -> bytes:
    return np.asarray(vec, dtype="<i8").tobytes()


def vec_from_bytes(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i8").astype(np.int64)


@dataclass(frozen=True)
class RoundSummary:
    """A stored round without its aggregate (what the privacy block and the budget check read)."""

    index: int
    plan: dict[str, Any]
    noise: PlannedNoise | None
    """Parsed from the round's JSON column (`PlannedNoise.to_dict()`); None for a round without noise."""
    contributors: int
    bits: int


@run_to_completion
class Rounds:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def get(self, query_id: str, index: int) -> Round | None:
        async with self.db.sessions() as s:
            return (
                await s.execute(select(Round).where(Round.query_id == query_id, Round.index == index))
            ).scalar_one_or_none()

    async def by_id(self, round_id: int) -> Round | None:
        async with self.db.sessions() as s:
            return await s.get(Round, round_id)

    async def summaries(self, query_id: str) -> list[RoundSummary]:
        """Every round of the query in order, without its aggregate (plan, noise, contributors, bits)."""
        from queries.dp import PlannedNoise

        async with self.db.sessions() as s:
            rows = (await s.execute(
                select(Round.index, Round.plan, Round.noise, Round.contributors, Round.bits)
                .where(Round.query_id == query_id).order_by(Round.index)
            )).all()
        return [RoundSummary(i, plan, None if noise is None else PlannedNoise.from_dict(noise), c, bits)
                for i, plan, noise, c, bits in rows]

    async def create(
        self, query_id: str, index: int, plan: dict[str, Any], noise: PlannedNoise | None, bits: int, need: int, dim: int
    ) -> Round:
        at = utc(self.clock)
        r = Round(query_id=query_id, index=index, plan=plan, noise=None if noise is None else noise.to_dict(), bits=bits, need=need, status="collecting",
                  aggregate=vec_to_bytes(np.zeros(dim, dtype=np.int64)), contributors=0, created_at=at)
        async with self.db.tx() as s:
            s.add(r)
            s.add(Event(query_id=query_id, type="round.started", data={"round": index, "need": need}, created_at=at))
        return r

    async def decode(self, round_id: int, query_id: str, state: dict[str, Any], next_round: int) -> None:
        """Atomically: round decoded, query state replaced, query moves to the next round."""
        at = utc(self.clock)
        async with self.db.tx() as s:
            await s.execute(update(Round).where(Round.id == round_id).values(status="decoded", decoded_at=at))
            await s.execute(
                update(Query).where(Query.id == query_id).values(state=state, current_round=next_round, updated_at=at)
            )
            s.add(Event(query_id=query_id, type="round.decoded", data={"round": next_round - 1}, created_at=at))

    async def sampling_secret(self, round_id: int, new_secret: bytes) -> bytes:
        """The round's sampling secret: the stored one, or `new_secret` stored now if the round has none yet
        (only the first writer's secret is kept, so every caller gets the same one)."""
        async with self.db.tx() as s:
            await s.execute(
                update(Round).where(Round.id == round_id, Round.sampling_secret.is_(None)).values(sampling_secret=new_secret)
            )
            secret = (await s.execute(select(Round.sampling_secret).where(Round.id == round_id))).scalar_one()
        assert secret is not None
        return bytes(secret)

    async def members(self, round_id: int) -> set[str]:
        """The devices seated in the round (contributed or not)."""
        async with self.db.sessions() as s:
            rows = (await s.execute(select(CohortMember.device_id).where(CohortMember.round_id == round_id))).scalars()
            return set(rows)

    async def contributors(self, query_id: str) -> dict[int, list[str]]:
        """Round index → the devices whose inputs are in its sum, sorted."""
        async with self.db.sessions() as s:
            rows = (
                await s.execute(
                    select(Round.index, CohortMember.device_id)
                    .join(Round, Round.id == CohortMember.round_id)
                    .where(Round.query_id == query_id, CohortMember.contributed.is_(True))
                )
            ).all()
        out: dict[int, list[str]] = {}
        for idx, dev in rows:
            out.setdefault(idx, []).append(dev)
        return {k: sorted(v) for k, v in sorted(out.items())}


__all__ = ["RoundSummary", "Rounds", "vec_from_bytes", "vec_to_bytes"]
