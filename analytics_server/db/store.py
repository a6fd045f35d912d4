"""All database reads and writes of the server, as small async methods (one transaction each).

Writes are serialised by one asyncio lock: SQLite allows one writer at a time, and the server is a
single process, so this removes "database is locked" retries without costing PostgreSQL anything that
matters at this scale. Transactions that must be atomic for exactness (a finished cohort's sum added to
its round, a round decoded into the query state) are single methods here.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from analytics_server.db.engine import session_factory
from analytics_server.db.models import (
    Cohort,
    CohortMember,
    Device,
    Event,
    Nonce,
    PrivacyBudget,
    PrivacyCharge,
    Query,
    Round,
    Token,
)
from queries import dp

ROLES = ("analyst", "admin")
TERMINAL = ("succeeded", "failed", "cancelled")


def now() -> datetime:
    return datetime.now(timezone.utc)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def vec_to_bytes(vec: np.ndarray) -> bytes:
    return np.asarray(vec, dtype="<i8").tobytes()


def vec_from_bytes(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i8").astype(np.int64)


@dataclass(frozen=True)
class TokenInfo:
    id: int
    role: str


@dataclass(frozen=True)
class BudgetState:
    """A source's ledger: total (admin-set or the configured default), spent (basic composition of the
    charged queries), remaining."""

    source: str
    total_epsilon: float
    total_delta: float
    spent_epsilon: float
    spent_delta: float
    remaining_epsilon: float
    remaining_delta: float
    queries_charged: int
    configured: bool
    """True when an admin set this source's total; False when it is the server default."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Store:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.sessions: async_sessionmaker[AsyncSession] = session_factory(engine)
        self._write = asyncio.Lock()

    def _tx(self) -> _Tx:
        return _Tx(self)

    # -- tokens ---------------------------------------------------------------------------------

    async def create_token(self, role: str, label: str | None = None) -> str:
        if role not in ROLES:
            raise ValueError(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
        token = "fa_" + secrets.token_urlsafe(32)
        async with self._tx() as s:
            s.add(Token(token_hash=hash_token(token), role=role, label=label, revoked=False, created_at=now()))
        return token

    async def lookup_token(self, token: str) -> TokenInfo | None:
        async with self.sessions() as s:
            row = (await s.execute(select(Token).where(Token.token_hash == hash_token(token)))).scalar_one_or_none()
        if row is None or row.revoked:
            return None
        return TokenInfo(row.id, row.role)

    # -- devices and nonces ---------------------------------------------------------------------

    async def register_device(self, device_id: str, public_key: bytes) -> None:
        async with self._write:
            async with self.sessions() as s:
                if await s.get(Device, device_id) is not None:
                    return
                s.add(Device(id=device_id, public_key=public_key, created_at=now()))
                await s.commit()

    async def device_key(self, device_id: str) -> bytes | None:
        async with self.sessions() as s:
            row = await s.get(Device, device_id)
        return None if row is None else row.public_key

    async def recent_nonces(self, since: float) -> dict[str, float]:
        async with self.sessions() as s:
            rows = (await s.execute(select(Nonce.key, Nonce.ts).where(Nonce.ts >= since))).all()
        return {k: ts for k, ts in rows}

    async def save_nonces(self, items: list[tuple[str, float]], prune_before: float) -> None:
        async with self._tx() as s:
            await s.execute(delete(Nonce).where(Nonce.ts < prune_before))
            if items:
                await s.execute(insert(Nonce), [{"key": k, "ts": t} for k, t in items])

    # -- queries --------------------------------------------------------------------------------

    async def create_query(
        self,
        kind: str,
        name: str | None,
        source: str,
        spec: dict[str, Any],
        state: dict[str, Any],
        rounds_upper_bound: int,
        calibration: dict[str, Any] | None,
        created_by: int | None,
        cost: dp.PrivacyCost | None = None,
        default_budget: dp.Budget | None = None,
    ) -> Query:
        """Insert the query; with a `cost`, charge it to the source's budget in the same transaction.

        The check (spent + cost ≤ total, basic composition) and the charge happen under the store's write
        lock inside one transaction, so two concurrent submits cannot both pass. Raises dp.BudgetExceeded
        (message names the remaining budget) and inserts nothing when the cost does not fit."""
        q = Query(
            id=secrets.token_hex(8),
            kind=kind,
            name=name,
            source=source,
            spec=spec,
            calibration=calibration,
            status="pending",
            state=state,
            current_round=0,
            rounds_upper_bound=rounds_upper_bound,
            created_by=created_by,
            created_at=now(),
            updated_at=now(),
        )
        async with self._tx() as s:
            if cost is not None:
                if default_budget is None:
                    raise ValueError("default_budget: required when charging a cost")
                budget, spent, _, _ = await self._ledger(s, source, default_budget)
                budget.check(spent, cost)  # raises BudgetExceeded → the transaction rolls back
            s.add(q)
            await s.flush()
            if cost is not None:
                s.add(PrivacyCharge(source=source, query_id=q.id, epsilon=cost.epsilon, delta=cost.delta,
                                    status="charged", created_at=now()))
            data: dict[str, Any] = {"kind": kind}
            if cost is not None:
                data["charged"] = cost.to_dict()
            s.add(Event(query_id=q.id, type="query.submitted", data=data, created_at=now()))
        return q

    # -- privacy-budget ledger ------------------------------------------------------------------

    @staticmethod
    async def _ledger(s: AsyncSession, source: str, default: dp.Budget) -> tuple[dp.Budget, dp.PrivacyCost, int, bool]:
        row = await s.get(PrivacyBudget, source)
        budget = default if row is None else dp.Budget(row.total_epsilon, row.total_delta)
        charges = (
            await s.execute(
                select(PrivacyCharge.epsilon, PrivacyCharge.delta).where(
                    PrivacyCharge.source == source, PrivacyCharge.status == "charged"
                )
            )
        ).all()
        return budget, dp.compose_costs([(e, d) for e, d in charges]), len(charges), row is not None

    async def get_budget(self, source: str, default: dp.Budget) -> BudgetState:
        async with self.sessions() as s:
            budget, spent, n, configured = await self._ledger(s, source, default)
        left = budget.remaining(spent)
        return BudgetState(source, budget.total_epsilon, budget.total_delta, spent.epsilon, spent.delta,
                           left.epsilon, left.delta, n, configured)

    async def list_budgets(self, default: dp.Budget) -> list[BudgetState]:
        """Every source with an admin-set total or at least one charge, by name."""
        async with self.sessions() as s:
            names = set((await s.execute(select(PrivacyBudget.source))).scalars())
            names |= set((await s.execute(select(PrivacyCharge.source).distinct())).scalars())
        return [await self.get_budget(name, default) for name in sorted(names)]

    async def set_budget(self, source: str, total_epsilon: float, total_delta: float) -> None:
        """Set a source's total (may be below what is already spent: then nothing more fits)."""
        dp.Budget(total_epsilon, total_delta)  # validates
        async with self._tx() as s:
            row = await s.get(PrivacyBudget, source)
            if row is None:
                s.add(PrivacyBudget(source=source, total_epsilon=total_epsilon, total_delta=total_delta, updated_at=now()))
            else:
                row.total_epsilon, row.total_delta, row.updated_at = total_epsilon, total_delta, now()
            s.add(Event(type="budget.set", data={"source": source, "epsilon": total_epsilon, "delta": total_delta},
                        created_at=now()))

    async def get_query(self, query_id: str) -> Query | None:
        async with self.sessions() as s:
            return await s.get(Query, query_id)

    async def list_queries(self, limit: int = 200) -> list[Query]:
        async with self.sessions() as s:
            return list((await s.execute(select(Query).order_by(Query.created_at.desc()).limit(limit))).scalars())

    async def queries_with_status(self, statuses: Iterable[str]) -> list[Query]:
        async with self.sessions() as s:
            return list((await s.execute(select(Query).where(Query.status.in_(list(statuses))))).scalars())

    async def count_queries_by_status(self) -> dict[str, int]:
        async with self.sessions() as s:
            rows = (await s.execute(select(Query.status, func.count()).group_by(Query.status))).all()
        return {status: n for status, n in rows}

    async def set_query_status(self, query_id: str, status: str, error: str | None = None) -> bool:
        """Move a non-terminal query to `status`; False when it was already terminal."""
        async with self._tx() as s:
            values: dict[str, Any] = {"status": status, "updated_at": now()}
            if error is not None:
                values["error"] = error
            if status in TERMINAL:
                values["finished_at"] = now()
            res = await s.execute(
                update(Query).where(Query.id == query_id, Query.status.not_in(TERMINAL)).values(**values)
            )
            if res.rowcount:
                s.add(Event(query_id=query_id, type=f"query.{status}", data={"error": error}, created_at=now()))
                if status in ("cancelled", "failed"):
                    await self._refund_if_unseen(s, query_id)
            return bool(res.rowcount)

    @staticmethod
    async def _refund_if_unseen(s: AsyncSession, query_id: str) -> None:
        """Refund the query's charge when no cohort of it finished: the server never saw a noisy sum."""
        finished = (
            await s.execute(
                select(func.count()).select_from(Cohort).where(Cohort.query_id == query_id, Cohort.status == "finished")
            )
        ).scalar_one()
        if finished:
            return
        res = await s.execute(
            update(PrivacyCharge)
            .where(PrivacyCharge.query_id == query_id, PrivacyCharge.status == "charged")
            .values(status="refunded", refunded_at=now())
        )
        if res.rowcount:
            s.add(Event(query_id=query_id, type="budget.refunded", data={}, created_at=now()))

    async def finish_query(self, query_id: str, result: dict[str, Any], privacy: dict[str, Any]) -> bool:
        async with self._tx() as s:
            res = await s.execute(
                update(Query)
                .where(Query.id == query_id, Query.status == "running")
                .values(status="succeeded", result=result, privacy=privacy, updated_at=now(), finished_at=now())
            )
            s.add(Event(query_id=query_id, type="query.succeeded", data={}, created_at=now()))
            return bool(res.rowcount)

    # -- rounds ---------------------------------------------------------------------------------

    async def get_round(self, query_id: str, index: int) -> Round | None:
        async with self.sessions() as s:
            return (
                await s.execute(select(Round).where(Round.query_id == query_id, Round.index == index))
            ).scalar_one_or_none()

    async def get_round_by_id(self, round_id: int) -> Round | None:
        async with self.sessions() as s:
            return await s.get(Round, round_id)

    async def create_round(
        self, query_id: str, index: int, plan: dict[str, Any], noise: dict[str, Any] | None, bits: int, need: int, dim: int
    ) -> Round:
        r = Round(
            query_id=query_id,
            index=index,
            plan=plan,
            noise=noise,
            bits=bits,
            need=need,
            status="collecting",
            aggregate=vec_to_bytes(np.zeros(dim, dtype=np.int64)),
            contributors=0,
            created_at=now(),
        )
        async with self._tx() as s:
            s.add(r)
            s.add(Event(query_id=query_id, type="round.started", data={"round": index, "need": need}, created_at=now()))
        return r

    async def decode_round(self, round_id: int, query_id: str, state: dict[str, Any], next_round: int) -> None:
        """Atomically: round decoded, query state replaced, query moves to the next round."""
        async with self._tx() as s:
            await s.execute(update(Round).where(Round.id == round_id).values(status="decoded", decoded_at=now()))
            await s.execute(
                update(Query).where(Query.id == query_id).values(state=state, current_round=next_round, updated_at=now())
            )
            s.add(Event(query_id=query_id, type="round.decoded", data={"round": next_round - 1}, created_at=now()))

    async def round_sampling_secret(self, round_id: int, new_secret: bytes) -> bytes:
        """The round's sampling secret: the stored one, or `new_secret` stored now if the round has none yet
        (only the first writer's secret is kept, so every caller gets the same one)."""
        async with self._tx() as s:
            await s.execute(
                update(Round).where(Round.id == round_id, Round.sampling_secret.is_(None)).values(sampling_secret=new_secret)
            )
            secret = (await s.execute(select(Round.sampling_secret).where(Round.id == round_id))).scalar_one()
        assert secret is not None
        return bytes(secret)

    async def round_members(self, round_id: int) -> set[str]:
        async with self.sessions() as s:
            rows = (await s.execute(select(CohortMember.device_id).where(CohortMember.round_id == round_id))).scalars()
            return set(rows)

    async def contributors(self, query_id: str) -> dict[int, list[str]]:
        async with self.sessions() as s:
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

    # -- cohorts --------------------------------------------------------------------------------

    async def create_cohort(
        self,
        cohort_id: str,
        query_id: str,
        round_id: int,
        secagg: dict[str, Any],
        mode: str,
        members: dict[str, int],
    ) -> None:
        """Insert the cohort and its seats; IntegrityError if a device already has a seat in this round."""
        async with self._tx() as s:
            s.add(
                Cohort(
                    id=cohort_id,
                    query_id=query_id,
                    round_id=round_id,
                    status="running",
                    n=len(members),
                    secagg=secagg,
                    mode=mode,
                    phase=0,
                    contributors=0,
                    created_at=now(),
                )
            )
            await s.flush()
            await s.execute(
                insert(CohortMember),
                [
                    {"cohort_id": cohort_id, "round_id": round_id, "device_id": d, "party": p, "contributed": False}
                    for d, p in members.items()
                ],
            )
            s.add(Event(query_id=query_id, cohort_id=cohort_id, type="cohort.formed", data={"n": len(members)}, created_at=now()))

    async def set_cohort_phase(self, cohort_id: str, phase: int) -> None:
        async with self._tx() as s:
            await s.execute(update(Cohort).where(Cohort.id == cohort_id).values(phase=phase))

    async def abort_cohort(self, cohort_id: str, reason: str) -> None:
        """Record the abort and free the seats so the devices may join another cohort of the round."""
        async with self._tx() as s:
            c = await s.get(Cohort, cohort_id)
            if c is None or c.status != "running":
                return
            c.status, c.reason, c.finished_at = "aborted", reason, now()
            await s.execute(delete(CohortMember).where(CohortMember.cohort_id == cohort_id))
            s.add(Event(query_id=c.query_id, cohort_id=cohort_id, type="cohort.aborted", data={"reason": reason}, created_at=now()))

    async def finish_cohort(
        self, cohort_id: str, total: np.ndarray, contributor_parties: Iterable[int], dropped: dict[str, list[int]]
    ) -> None:
        """Atomically: cohort finished with its sum, seats marked, sum and count added to the round."""
        parties = sorted(contributor_parties)
        async with self._tx() as s:
            c = await s.get(Cohort, cohort_id)
            if c is None or c.status != "running":
                raise RuntimeError(f"cohort {cohort_id} is not running")
            r = await s.get(Round, c.round_id)
            assert r is not None
            agg = vec_from_bytes(r.aggregate)
            if agg.shape != total.shape:
                raise RuntimeError(f"cohort {cohort_id}: sum has shape {total.shape}, round expects {agg.shape}")
            r.aggregate = vec_to_bytes(agg + total)
            r.contributors = r.contributors + len(parties)
            c.status, c.sum, c.contributors, c.dropped, c.finished_at = "finished", vec_to_bytes(total), len(parties), dropped, now()
            c.phase = 5
            if parties:
                await s.execute(
                    update(CohortMember)
                    .where(CohortMember.cohort_id == cohort_id, CohortMember.party.in_(parties))
                    .values(contributed=True)
                )
            s.add(
                Event(
                    query_id=c.query_id,
                    cohort_id=cohort_id,
                    type="cohort.finished",
                    data={"contributors": len(parties)},
                    created_at=now(),
                )
            )

    async def cohorts_of_round(self, round_id: int) -> list[Cohort]:
        async with self.sessions() as s:
            return list((await s.execute(select(Cohort).where(Cohort.round_id == round_id))).scalars())

    async def abort_running_cohorts(self, reason: str) -> int:
        """At startup: every cohort still marked running died with the previous process."""
        async with self.sessions() as s:
            ids = list((await s.execute(select(Cohort.id).where(Cohort.status == "running"))).scalars())
        for cid in ids:
            await self.abort_cohort(cid, reason)
        return len(ids)

    async def events(self, query_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        async with self.sessions() as s:
            return list(
                (
                    await s.execute(
                        select(Event).where(Event.query_id == query_id, Event.id > after).order_by(Event.id).limit(limit)
                    )
                ).scalars()
            )


class _Tx:
    """`async with store._tx() as session:` — serialised write transaction, committed on success."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def __aenter__(self) -> AsyncSession:
        await self.store._write.acquire()
        self.session = self.store.sessions()
        return await self.session.__aenter__()

    async def __aexit__(self, exc_type, exc, tb) -> None:  # type: ignore[no-untyped-def]
        try:
            if exc_type is None:
                await self.session.commit()
            else:
                await self.session.rollback()
        finally:
            await self.session.__aexit__(exc_type, exc, tb)
            self.store._write.release()


__all__ = ["BudgetState", "IntegrityError", "Store", "TokenInfo", "ROLES", "TERMINAL", "vec_from_bytes", "vec_to_bytes"]
