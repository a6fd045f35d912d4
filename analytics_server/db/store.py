"""All database reads and writes of the server, as small async methods (one transaction each).

Writes are serialised by one asyncio lock: SQLite allows one writer at a time, and the server is a
single process, so this removes "database is locked" retries without costing PostgreSQL anything that
matters at this scale. Transactions that must be atomic for exactness (a finished cohort's sum added to
its round, a round decoded into the query state) are single methods here.

Privacy charges (and the per-analyst quota and active-query cap checked with them) do not rely on that
in-process lock: they run under a database lock (`_Tx(locks=…)`), a `BEGIN IMMEDIATE` transaction on
SQLite and `SELECT … FOR UPDATE` on the `ledger_locks` rows of the source and the analyst on PostgreSQL,
so two server processes on one database cannot both spend the last of a budget.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import logging
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar, cast

import numpy as np
from sqlalchemy import CursorResult, Result, bindparam, delete, func, insert, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from analytics_server.db.blame_store import BlameStore
from analytics_server.db.cluster_store import ClaimLost, ClusterStore, _claim, _release
from analytics_server.db.reports import ReportStore
from analytics_server.db.translog_store import LOG_LOCK, LogStore, now_ms
from analytics_server.logs import fields
from analytics_server.db.engine import session_factory
from analytics_server.db.models import (
    Cohort,
    CohortMember,
    Device,
    DevicePresence,
    Event,
    LedgerLock,
    Nonce,
    PrivacyBudget,
    PrivacyCharge,
    Query,
    QueryExclusion,
    Round,
    ServerProcess,
    Token,
)
from queries import dp
from translog import entries as te
from secagg.phases import Phase

log = logging.getLogger(__name__)
ROLES = ("analyst", "admin", "metrics")
"""`metrics` may only read `/metrics` (for a Prometheus scraper)."""
TOKEN_PREFIX_CHARS = 10
"""Characters of a token kept in clear ("fa_" + 7 random ones, 42 of its 256 random bits) to name it."""
TERMINAL = ("succeeded", "failed", "cancelled")
ACTIVE = ("pending", "running")


class QueryNotLive(RuntimeError):
    """A cohort tried to store its sum for a query that is already terminal (cancelled, failed)."""


class ActiveQueryLimit(Exception):
    """The analyst already has as many pending or running queries as allowed (HTTP 429)."""


class AnalystQuotaExceeded(Exception):
    """The query's ε does not fit the submitting analyst's quota (HTTP 422)."""


@dataclass(frozen=True)
class AnalystLimits:
    """What one analyst token may hold: ε of charged queries within `window_s` (0: lifetime) across all
    sources (`epsilon_quota`, None: unlimited; a token's own admin-set quota wins) and pending + running
    queries (`max_active`, None: unlimited)."""

    epsilon_quota: float | None = None
    window_s: float = 0.0
    max_active: int | None = None


def now() -> datetime:
    return datetime.now(timezone.utc)


def _rowcount(res: Result[Any]) -> int:
    """Rows an UPDATE or DELETE matched: `execute` is typed as returning a `Result`, but for these statements
    it is a `CursorResult`, which carries the count."""
    return cast(CursorResult[Any], res).rowcount


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
class AnalystUsage:
    """One analyst token's quota state (`GET /v1/quota`)."""

    token_id: int
    epsilon_quota: float | None
    epsilon_used: float
    epsilon_remaining: float | None
    window_s: float
    configured: bool
    """True when an admin set this token's quota; False when it is the server default."""
    active_queries: int
    max_active_queries: int | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class RoundSummary:
    """A stored round without its aggregate (what the privacy block and the budget check read)."""

    index: int
    plan: dict[str, Any]
    noise: dict[str, Any] | None
    contributors: int
    bits: int


@dataclass(frozen=True)
class TokenRow:
    """A token as `fa-server token list` shows it (never the token itself: only its hash is stored)."""

    id: int
    prefix: str | None
    role: str
    label: str | None
    created_at: datetime
    revoked: bool


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


S = TypeVar("S")


def _run_to_completion(cls: type[S]) -> type[S]:
    """Every public coroutine method of `cls` (its own and its mixins') runs to completion even when its caller
    is cancelled.

    A query's task is cancelled at whatever it awaits; cancelling a database call half way (aiosqlite runs it
    in a thread) can leave a connection holding SQLite's write lock until it is garbage-collected, and every
    other writer then fails with "database is locked". Shielded, the call finishes (commits or rolls back)
    and only the caller sees the CancelledError."""
    names = {n for klass in cls.__mro__ for n, fn in vars(klass).items()
             if not n.startswith("_") and inspect.iscoroutinefunction(fn)}
    for name in names:
        fn = getattr(cls, name)

        def wrap(f: Any) -> Any:
            @functools.wraps(f)
            async def shielded(*args: Any, **kwargs: Any) -> Any:
                return await asyncio.shield(f(*args, **kwargs))

            return shielded

        setattr(cls, name, wrap(fn))
    return cls


@_run_to_completion
class Store(ClusterStore, ReportStore, LogStore, BlameStore):
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.sessions: async_sessionmaker[AsyncSession] = session_factory(engine)
        self._write = asyncio.Lock()

    def _tx(self, locks: Iterable[str] = ()) -> _Tx:
        return _Tx(self, tuple(locks))

    # -- tokens ---------------------------------------------------------------------------------

    async def create_token(self, role: str, label: str | None = None) -> str:
        if role not in ROLES:
            raise ValueError(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
        token = "fa_" + secrets.token_urlsafe(32)
        async with self._tx() as s:
            s.add(Token(token_hash=hash_token(token), prefix=token[:TOKEN_PREFIX_CHARS], role=role, label=label,
                        revoked=False, created_at=now()))
        return token

    async def lookup_token(self, token: str) -> TokenInfo | None:
        async with self.sessions() as s:
            row = (await s.execute(select(Token).where(Token.token_hash == hash_token(token)))).scalar_one_or_none()
        if row is None or row.revoked:
            return None
        return TokenInfo(row.id, row.role)

    async def list_tokens(self) -> list[TokenRow]:
        async with self.sessions() as s:
            rows = (await s.execute(select(Token).order_by(Token.id))).scalars()
            return [TokenRow(r.id, r.prefix, r.role, r.label, r.created_at, r.revoked) for r in rows]

    async def revoke_token(self, id_or_prefix: str) -> TokenRow:
        """Mark one token revoked, named by its id or by a prefix of the token that matches exactly one
        token. Raises LookupError (no match, or an ambiguous prefix). Revoking twice is harmless."""
        async with self._tx() as s:
            rows: list[Token] = []
            if id_or_prefix.isdigit():
                row = await s.get(Token, int(id_or_prefix))
                rows = [row] if row is not None else []
            elif len(id_or_prefix) < 4:
                raise LookupError(f"{id_or_prefix!r}: give a token id or at least 4 characters of its prefix")
            else:
                pattern = id_or_prefix[:TOKEN_PREFIX_CHARS]
                rows = list((await s.execute(select(Token).where(Token.prefix.startswith(pattern, autoescape=True)))).scalars())
                if len(id_or_prefix) > TOKEN_PREFIX_CHARS:  # longer than a prefix: the whole token
                    rows = [r for r in rows if r.token_hash == hash_token(id_or_prefix)]
            if not rows:
                raise LookupError(f"no token with id or prefix {id_or_prefix!r}")
            if len(rows) > 1:
                raise LookupError(f"prefix {id_or_prefix!r} matches {len(rows)} tokens (ids "
                                  f"{', '.join(str(r.id) for r in rows)}); give the id")
            row = rows[0]
            if not row.revoked:
                row.revoked = True
                s.add(Event(type="token.revoked", data={"token_id": row.id}, created_at=now()))
            return TokenRow(row.id, row.prefix, row.role, row.label, row.created_at, True)

    # -- devices and nonces ---------------------------------------------------------------------

    async def register_device(self, device_id: str, public_key: bytes, identity_token: bytes | None = None) -> None:
        """Insert the device; registering again only adds a token it did not have (a token is never replaced)."""
        async with self._write:
            async with self.sessions() as s:
                row = await s.get(Device, device_id)
                if row is None:
                    s.add(Device(id=device_id, public_key=public_key, created_at=now(), identity_token=identity_token))
                elif row.identity_token is None and identity_token is not None:
                    row.identity_token = identity_token
                else:
                    return
                await s.commit()

    async def device_key(self, device_id: str) -> bytes | None:
        return (await self.device_identity(device_id))[0]

    async def device_identity(self, device_id: str) -> tuple[bytes | None, bytes | None]:
        """(public key, identity token) of a device; (None, None) when unknown."""
        async with self.sessions() as s:
            row = await s.get(Device, device_id)
        return (None, None) if row is None else (row.public_key, row.identity_token)

    async def device_keys(self, device_ids: list[str]) -> dict[str, tuple[bytes, bytes | None]]:
        """Per device: (public key, identity token or None)."""
        async with self.sessions() as s:
            rows = (await s.execute(select(Device.id, Device.public_key, Device.identity_token)
                                    .where(Device.id.in_(device_ids)))).all()
        return {d: (bytes(k), None if t is None else bytes(t)) for d, k, t in rows}

    async def claim_nonces(self, rows: list[tuple[str, str, float]]) -> set[tuple[str, str]]:
        """Insert (device_id, nonce, expires_at) rows in one transaction; returns the (device_id, nonce)
        pairs that were new. A pair already stored (by this or any other server process) is a replay and
        is left out. `rows` must not repeat a pair."""
        if not rows:
            return set()
        stmt = (
            self._upsert()(Nonce.__table__)  # the Core table: the ORM's bulk-values path costs ~10× more per row
            .values([{"device_id": d, "nonce": n, "expires_at": e} for d, n, e in rows])
            .on_conflict_do_nothing(index_elements=["device_id", "nonce"])
            .returning(Nonce.__table__.c.device_id, Nonce.__table__.c.nonce)
        )
        async with self._tx() as s:
            inserted = (await s.execute(stmt)).all()
        return {(d, n) for d, n in inserted}

    async def prune_nonces(self, now_ts: float) -> int:
        """Delete nonces whose expiry passed: no request carrying them passes the timestamp check any more."""
        async with self._tx() as s:
            res = await s.execute(delete(Nonce).where(Nonce.expires_at < now_ts))
            return int(_rowcount(res) or 0)

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
        limits: AnalystLimits | None = None,
    ) -> Query:
        """Insert the query; with a `cost`, charge it to the source's budget in the same transaction.

        The check (spent + cost ≤ total, basic composition) and the charge happen inside one transaction
        holding the database lock of the source (and, with `limits`, of the analyst `created_by`), so two
        concurrent submits cannot both pass, even from two server processes. Raises ActiveQueryLimit,
        AnalystQuotaExceeded or dp.BudgetExceeded (messages name the limit and what remains) and inserts
        nothing when the query does not fit."""
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
        if cost is not None and default_budget is None:
            raise ValueError("default_budget: required when charging a cost")
        check_analyst = limits is not None and created_by is not None
        locks = ([f"source:{source}"] if cost is not None else []) + ([f"analyst:{created_by}"] if check_analyst else [])
        async with self._tx([*locks, LOG_LOCK]) as s:
            if check_analyst:
                assert limits is not None and created_by is not None
                await self._check_analyst(s, created_by, cost, limits)
            if cost is not None:
                assert default_budget is not None
                budget, spent, _, _ = await self._ledger(s, source, default_budget)
                budget.check(spent, cost)  # raises BudgetExceeded → the transaction rolls back
            s.add(q)
            await s.flush()
            if cost is not None:
                s.add(PrivacyCharge(source=source, query_id=q.id, epsilon=cost.epsilon, delta=cost.delta,
                                    status="charged", created_at=now()))
            at = now_ms()
            await self._log_append(s, [te.query_entry(q.id, source, kind, spec, at)] + (
                [te.charge_entry(q.id, source, cost.epsilon, cost.delta, at)] if cost is not None else []))
            data: dict[str, Any] = {"kind": kind}
            if cost is not None:
                data["charged"] = cost.to_dict()
            s.add(Event(query_id=q.id, type="query.submitted", data=data, created_at=now()))
        return q

    # -- per-analyst limits ---------------------------------------------------------------------

    @staticmethod
    async def _analyst_state(s: AsyncSession, token_id: int, limits: AnalystLimits) -> AnalystUsage:
        token = await s.get(Token, token_id)
        own = None if token is None else token.epsilon_quota
        quota = own if own is not None else limits.epsilon_quota
        active = (
            await s.execute(
                select(func.count()).select_from(Query).where(Query.created_by == token_id, Query.status.in_(ACTIVE))
            )
        ).scalar_one()
        used_q = (
            select(func.coalesce(func.sum(PrivacyCharge.epsilon), 0.0))
            .join(Query, Query.id == PrivacyCharge.query_id)
            .where(Query.created_by == token_id, PrivacyCharge.status == "charged")
        )
        if limits.window_s > 0:
            used_q = used_q.where(PrivacyCharge.created_at >= now() - timedelta(seconds=limits.window_s))
        used = float((await s.execute(used_q)).scalar_one())
        remaining = None if quota is None else max(0.0, quota - used)
        return AnalystUsage(token_id, quota, used, remaining, limits.window_s, own is not None, int(active), limits.max_active)

    async def _check_analyst(self, s: AsyncSession, token_id: int, cost: dp.PrivacyCost | None, limits: AnalystLimits) -> None:
        usage = await self._analyst_state(s, token_id, limits)
        if usage.max_active_queries is not None and usage.active_queries >= usage.max_active_queries:
            raise ActiveQueryLimit(
                f"max_active_queries_per_analyst: this token already has {usage.active_queries} pending or running "
                f"queries, the limit is {usage.max_active_queries}; wait for one to finish or cancel one"
            )
        quota = usage.epsilon_quota
        if cost is not None and quota is not None and usage.epsilon_used + cost.epsilon > quota * (1 + 1e-9):
            window = f"within {usage.window_s:g} s" if usage.window_s > 0 else "in total"
            raise AnalystQuotaExceeded(
                f"privacy.epsilon: the query costs epsilon={cost.epsilon:g} but this analyst's quota has only "
                f"epsilon={usage.epsilon_remaining:g} remaining of {quota:g} {window} (analyst_epsilon_quota)"
            )

    async def analyst_usage(self, token_id: int, limits: AnalystLimits) -> AnalystUsage:
        async with self.sessions() as s:
            return await self._analyst_state(s, token_id, limits)

    async def set_token_quota(self, token_id: int, epsilon: float | None) -> bool:
        """Set (or with None clear) a token's own ε quota; False when there is no such token."""
        async with self._tx([f"analyst:{token_id}"]) as s:
            token = await s.get(Token, token_id)
            if token is None:
                return False
            token.epsilon_quota = epsilon
            s.add(Event(type="quota.set", data={"token_id": token_id, "epsilon": epsilon}, created_at=now()))
        return True

    async def get_token(self, token_id: int) -> TokenInfo | None:
        async with self.sessions() as s:
            row = await s.get(Token, token_id)
        return None if row is None else TokenInfo(row.id, row.role)

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
        async with self._tx([f"source:{source}", LOG_LOCK]) as s:
            await self._log_append(s, [te.budget_entry(source, total_epsilon, total_delta, now_ms())])
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

    async def list_queries(self, limit: int = 200, created_by: int | None = None) -> list[Query]:
        """Newest first; with `created_by`, only the queries that token submitted."""
        stmt = select(Query).order_by(Query.created_at.desc()).limit(limit)
        if created_by is not None:
            stmt = stmt.where(Query.created_by == created_by)
        async with self.sessions() as s:
            return list((await s.execute(stmt)).scalars())

    async def queries_with_status(self, statuses: Iterable[str]) -> list[Query]:
        async with self.sessions() as s:
            return list((await s.execute(select(Query).where(Query.status.in_(list(statuses))))).scalars())

    async def count_queries_by_status(self) -> dict[str, int]:
        async with self.sessions() as s:
            rows = (await s.execute(select(Query.status, func.count()).group_by(Query.status))).all()
        return {status: n for status, n in rows}

    async def set_query_status(self, query_id: str, status: str, error: str | None = None) -> bool:
        """Move a non-terminal query to `status`; False when it was already terminal."""
        async with self._tx([LOG_LOCK] if status in ("cancelled", "failed") else []) as s:
            values: dict[str, Any] = {"status": status, "updated_at": now()}
            if error is not None:
                values["error"] = error
            if status in TERMINAL:
                values["finished_at"] = now()
            res = await s.execute(
                update(Query).where(Query.id == query_id, Query.status.not_in(TERMINAL)).values(**values)
            )
            charge = None
            if _rowcount(res):
                s.add(Event(query_id=query_id, type=f"query.{status}", data={"error": error}, created_at=now()))
                if status in ("cancelled", "failed"):
                    charge = await self._refund_if_unseen(s, query_id)
        if _rowcount(res) and status in TERMINAL:
            await self._log_ended(query_id, status, error, charge)
        return bool(_rowcount(res))

    async def _log_ended(self, query_id: str, status: str, error: str | None, charge: str | None = None) -> None:
        """INFO line for a query that reached a terminal status (after the transaction that ended it)."""
        async with self.sessions() as s:
            q = await s.get(Query, query_id)
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

    async def _refund_if_unseen(self, s: AsyncSession, query_id: str) -> str | None:
        """Refund the query's charge iff no masked-input phase of any of its cohorts closed: until then the
        server holds no set of masked inputs it could unmask, so nothing about the data could have been seen.
        Once one closed (even if the cohort aborted later, e.g. cancelled during unmasking) the charge stays."""
        seen = (
            await s.execute(
                select(func.count()).select_from(Cohort).where(
                    Cohort.query_id == query_id, or_(Cohort.masked_input_closed.is_(True), Cohort.status == "finished")
                )
            )
        ).scalar_one()
        if seen:
            charged = (
                await s.execute(select(func.count()).select_from(PrivacyCharge).where(
                    PrivacyCharge.query_id == query_id, PrivacyCharge.status == "charged"))
            ).scalar_one()
            if charged:
                s.add(Event(query_id=query_id, type="budget.kept",
                            data={"reason": f"masked inputs of {seen} cohort(s) were closed"}, created_at=now()))
                return "kept"
            return None
        refunded = (await s.execute(select(PrivacyCharge).where(
            PrivacyCharge.query_id == query_id, PrivacyCharge.status == "charged"))).scalars().all()
        res = await s.execute(
            update(PrivacyCharge)
            .where(PrivacyCharge.query_id == query_id, PrivacyCharge.status == "charged")
            .values(status="refunded", refunded_at=now())
        )
        await self._log_append(s, [te.charge_entry(query_id, c.source, c.epsilon, c.delta, now_ms(), refund=True)
                                   for c in refunded])
        if _rowcount(res):
            s.add(Event(query_id=query_id, type="budget.refunded", data={}, created_at=now()))
            return "refunded"
        return None

    async def finish_query(
        self, query_id: str, result: dict[str, Any], privacy: dict[str, Any],
        uncertainty: dict[str, Any] | None = None, warnings: list[dict[str, Any]] | None = None,
        failure: str | None = None,
    ) -> bool:
        """Store the release; the query succeeds, or — with `failure` (e.g. training diverged) — fails with that
        error while its result stays readable. A failed query's charge stays (its cohorts saw masked inputs)."""
        status = "failed" if failure else "succeeded"
        async with self._tx([LOG_LOCK]) as s:
            res = await s.execute(
                update(Query)
                .where(Query.id == query_id, Query.status == "running")
                .values(status=status, result=result, privacy=privacy, uncertainty=uncertainty, warnings=warnings,
                        error=failure, updated_at=now(), finished_at=now())
            )
            charge = None
            if _rowcount(res):
                await self._log_append(s, [te.release_entry(query_id, status, result, privacy, now_ms())])
                s.add(Event(query_id=query_id, type=f"query.{status}", data={"error": failure} if failure else {},
                            created_at=now()))
                if failure:
                    charge = await self._refund_if_unseen(s, query_id)
        if _rowcount(res):
            await self._log_ended(query_id, status, failure, charge)
        return bool(_rowcount(res))

    # -- rounds ---------------------------------------------------------------------------------

    async def get_round(self, query_id: str, index: int) -> Round | None:
        async with self.sessions() as s:
            return (
                await s.execute(select(Round).where(Round.query_id == query_id, Round.index == index))
            ).scalar_one_or_none()

    async def round_summaries(self, query_id: str) -> list[RoundSummary]:
        """Every round of the query in order, without its aggregate (plan, noise, contributors, bits)."""
        async with self.sessions() as s:
            rows = (await s.execute(
                select(Round.index, Round.plan, Round.noise, Round.contributors, Round.bits)
                .where(Round.query_id == query_id).order_by(Round.index)
            )).all()
        return [RoundSummary(*row) for row in rows]

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

    async def exclude_device(self, query_id: str, device_id: str, reason: str) -> None:
        """Leave `device_id` out of every later cohort of the query (kept once: a second reason is not stored)."""
        stmt = self._upsert()(QueryExclusion.__table__).values(
            query_id=query_id, device_id=device_id, reason=reason[:2000], created_at=now()).on_conflict_do_nothing()
        async with self._tx() as s:
            await s.execute(stmt)

    async def excluded_devices(self, query_id: str) -> dict[str, str]:
        """The devices excluded from the query, with why."""
        async with self.sessions() as s:
            rows = (await s.execute(select(QueryExclusion.device_id, QueryExclusion.reason)
                                    .where(QueryExclusion.query_id == query_id))).all()
        return {d: r for d, r in rows}

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
        phase: int = Phase.ADVERTISE_KEYS,
        owner: str | None = None,
        assignments: dict[str, dict[str, Any]] | None = None,
        task: tuple[int, bytes, dict[str, Any]] | None = None,
        claim: bool = False,
    ) -> None:
        """Insert the cohort (open in `phase`, run by process `owner`) and its seats, and store each member's
        assignment for delivery; with `task` (round index, task digest, the config's `public_summary`) log the
        cohort's task first
        (docs/transparency.md); IntegrityError if a device already has a seat in this round.

        `claim`: a forming cohort. Its members are claimed in the same transaction, all of them or nothing
        (ClaimLost naming those another cohort took or whose availability lapsed), and only while the query is live
        and leased by `owner` (QueryNotLive): the claims and the cohort they name commit together, so a process that
        dies at any step leaves either nothing or a running cohort that a takeover aborts."""
        if claim:
            self._fault("before_claims")
        async with self._tx([LOG_LOCK] if task is not None else []) as s:
            if claim:
                await _query_live_locked(s, query_id, owner)  # a process that lost the lease seats nobody
                claimed = await _claim(s, cohort_id, list(members))
                if len(claimed) < len(members):
                    raise ClaimLost(cohort_id, set(members).difference(claimed))  # rolls the claims back
                self._fault("claimed")
            if task is not None:
                await self._log_append(s, [te.task_entry(query_id, task[0], cohort_id, task[1], now_ms(), task[2])])
            if claim:
                self._fault("logged")
            s.add(
                Cohort(
                    id=cohort_id,
                    query_id=query_id,
                    round_id=round_id,
                    status="running",
                    n=len(members),
                    secagg=secagg,
                    mode=mode,
                    phase=int(phase),
                    contributors=0,
                    created_at=now(),
                    owner=owner,
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
            if assignments:  # one statement for all members (executemany), not one compiled ORM UPDATE each
                presence = DevicePresence.__table__
                await s.execute(
                    update(presence)
                    .where(presence.c.device_id == bindparam("b_device"), presence.c.cohort_id == cohort_id)
                    .values(assignment=bindparam("b_assignment", type_=presence.c.assignment.type)),
                    [{"b_device": d, "b_assignment": a} for d, a in assignments.items()],
                )
            s.add(Event(query_id=query_id, cohort_id=cohort_id, type="cohort.formed", data={"n": len(members)}, created_at=now()))
            if claim:
                await s.flush()
                self._fault("cohort_row")
        if claim:
            self._fault("committed")

    async def mark_masked_input_closed(self, cohort_id: str, owner: str | None = None) -> None:
        """Record, before the next phase's messages go out, that the cohort's masked-input phase closed.

        Raises QueryNotLive (and records nothing) when the query is terminal or, with `owner`, leased by another
        process. The query's row is locked first, so this and a cancellation's refund decision (another
        process's `set_query_status`) are ordered: a cancel that refunded is never followed by a closed phase."""
        async with self._tx() as s:
            c = await s.get(Cohort, cohort_id)
            if c is None:
                raise QueryNotLive(f"cohort {cohort_id} is gone")
            await _query_live_locked(s, c.query_id, owner)
            await s.execute(update(Cohort).where(Cohort.id == cohort_id).values(masked_input_closed=True))

    async def set_cohort_phase(self, cohort_id: str, phase: int) -> None:
        """Record that a running cohort opened `phase` (its row and a `cohort.phase` event)."""
        async with self._tx() as s:
            c = await s.get(Cohort, cohort_id)
            if c is None or c.status != "running":
                return
            c.phase = int(phase)
            s.add(Event(query_id=c.query_id, cohort_id=cohort_id, type="cohort.phase",
                        data={"phase": Phase(phase).label}, created_at=now()))

    async def abort_cohort(self, cohort_id: str, reason: str, phase: int | None = None, keep_seats: bool = False) -> None:
        """Record the abort and free the seats so the devices may join another cohort of the round.

        `phase` is the phase that could not complete; without it the cohort keeps the last phase recorded.
        `keep_seats`: the members keep their seats in the round (not contributed) and so never join another
        cohort of it — for a cohort whose sum the server already unmasked (a detected cheat): its devices'
        data must not enter a second sum of the same round."""
        async with self._tx() as s:
            c = await s.get(Cohort, cohort_id)
            if c is None or c.status != "running":
                return
            c.status, c.reason, c.finished_at = "aborted", reason, now()
            if phase is not None:
                c.phase = int(phase)
            if not keep_seats:
                await s.execute(delete(CohortMember).where(CohortMember.cohort_id == cohort_id))
            await _release(s, cohort_id)
            s.add(Event(query_id=c.query_id, cohort_id=cohort_id, type="cohort.aborted",
                        data={"reason": reason, "phase": Phase(c.phase).label}, created_at=now()))

    async def finish_cohort(
        self, cohort_id: str, total: np.ndarray, contributor_parties: Iterable[int], dropped: dict[str, list[int]],
        owner: str | None = None,
    ) -> None:
        """Atomically: cohort finished with its sum, seats marked, sum and count added to the round, devices
        freed. QueryNotLive when the query is terminal or (with `owner`) its lease passed to another process."""
        parties = sorted(contributor_parties)
        async with self._tx() as s:
            c = await s.get(Cohort, cohort_id)
            if c is None or c.status != "running":
                raise QueryNotLive(f"cohort {cohort_id} is {c.status if c else 'gone'}; its sum is not stored")
            await _query_live_locked(s, c.query_id, owner)  # no sum for a dead query or a lost lease
            r = await s.get(Round, c.round_id)
            assert r is not None
            agg = vec_from_bytes(r.aggregate)
            if agg.shape != total.shape:
                raise RuntimeError(f"cohort {cohort_id}: sum has shape {total.shape}, round expects {agg.shape}")
            r.aggregate = vec_to_bytes(agg + total)
            r.contributors = r.contributors + len(parties)
            c.status, c.sum, c.contributors, c.dropped, c.finished_at = "finished", vec_to_bytes(total), len(parties), dropped, now()
            c.phase = int(Phase.DONE)
            c.masked_input_closed = True
            await _release(s, cohort_id)
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

    async def abort_running_cohorts(self, reason: str, query_id: str | None = None, keep_owner: str | None = None) -> int:
        """Abort cohorts still marked running whose process is gone: all of them (the single-process server
        at startup) or, with `query_id`, those of one query not run by `keep_owner` (a lease takeover)."""
        stmt = select(Cohort.id).where(Cohort.status == "running")
        if query_id is not None:
            stmt = stmt.where(Cohort.query_id == query_id)
        if keep_owner is not None:
            stmt = stmt.where(or_(Cohort.owner.is_(None), Cohort.owner != keep_owner))
        async with self.sessions() as s:
            ids = list((await s.execute(stmt)).scalars())
        for cid in ids:
            await self.abort_cohort(cid, reason)
        return len(ids)

    async def release_abandoned(self, ttl: float) -> tuple[int, int]:
        """Free the devices dead processes left claimed; (cohorts aborted, claims released).

        Cohorts still running whose query ended while their process was not live (no heartbeat within `ttl`):
        nobody takes such a query over, and they can never store a sum; they are aborted. Claims naming no running
        cohort (left by a server version that claimed before storing the cohort and died in between) are released,
        keeping the device's availability: it never learnt of the claim. Safe beside live processes: their claims
        commit together with their running cohort (`create_cohort(claim=True)`), so neither is ever seen without
        the other, and their own cohorts are left to them."""
        t = time.time()
        live = select(ServerProcess.id).where(ServerProcess.stopped.is_(False), ServerProcess.heartbeat_at > t - ttl)
        async with self.sessions() as s:
            ended = list((await s.execute(
                select(Cohort.id).join(Query, Query.id == Cohort.query_id)
                .where(Cohort.status == "running", Query.status.in_(TERMINAL),
                       or_(Cohort.owner.is_(None), Cohort.owner.not_in(live)))
            )).scalars())
        for cid in ended:
            await self.abort_cohort(cid, "its server process is gone")
        running = select(Cohort.id).where(Cohort.id == DevicePresence.cohort_id, Cohort.status == "running")
        async with self._tx() as s:
            res = await s.execute(
                update(DevicePresence).where(DevicePresence.cohort_id.is_not(None), ~running.exists())
                .values(cohort_id=None, assignment=None)
            )
        return len(ended), _rowcount(res)

    async def events(self, query_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        async with self.sessions() as s:
            return list(
                (
                    await s.execute(
                        select(Event).where(Event.query_id == query_id, Event.id > after).order_by(Event.id).limit(limit)
                    )
                ).scalars()
            )


async def _query_live_locked(s: AsyncSession, query_id: str, owner: str | None) -> None:
    """Lock the query's row (PostgreSQL) and raise QueryNotLive unless it is live and, with `owner`, leased by
    that process."""
    row = (
        await s.execute(select(Query.status, Query.lease_owner).where(Query.id == query_id).with_for_update())
    ).first()
    if row is None or row[0] in TERMINAL:
        raise QueryNotLive(f"query {query_id} is {row[0] if row else 'gone'}; the cohort's sum is not stored")
    if owner is not None and row[1] != owner:
        raise QueryNotLive(f"query {query_id} is now run by another server process (lease lost)")


class _Tx:
    """`async with store._tx() as session:` — serialised write transaction, committed on success.

    With `locks` (names such as `source:words`, `analyst:7`) the transaction also holds database locks that
    serialise it against other processes: `BEGIN IMMEDIATE` on SQLite (the database write lock, taken before
    the first read), `SELECT … FOR UPDATE` on each name's `ledger_locks` row on PostgreSQL (sorted, so two
    transactions never wait on each other in opposite orders)."""

    def __init__(self, store: Store, locks: tuple[str, ...] = ()) -> None:
        self.store = store
        self.locks = locks

    async def __aenter__(self) -> AsyncSession:
        await self.store._write.acquire()
        self.session = self.store.sessions()
        try:
            session = await self.session.__aenter__()
            if self.locks:
                await _lock(session, self.store.engine.dialect.name, self.locks)
        except BaseException:
            await self.session.close()
            self.store._write.release()
            raise
        return session

    async def __aexit__(self, exc_type, exc, tb) -> None:  # type: ignore[no-untyped-def]
        try:
            if exc_type is None:
                await self.session.commit()
            else:
                await self.session.rollback()
        finally:
            await self.session.__aexit__(exc_type, exc, tb)
            self.store._write.release()


async def _lock(session: AsyncSession, dialect: str, names: tuple[str, ...]) -> None:
    if dialect == "sqlite":
        await session.execute(text("BEGIN IMMEDIATE"))
    elif dialect == "postgresql":
        for name in sorted(set(names)):
            await session.execute(pg_insert(LedgerLock).values(name=name).on_conflict_do_nothing())
            await session.execute(select(LedgerLock.name).where(LedgerLock.name == name).with_for_update())
    else:
        raise RuntimeError(f"no ledger lock for database dialect {dialect!r} (supported: sqlite, postgresql)")


__all__ = ["BudgetState", "ClaimLost", "IntegrityError", "Store", "TokenInfo", "ROLES", "TERMINAL", "vec_from_bytes", "vec_to_bytes",
           "ACTIVE", "ActiveQueryLimit", "AnalystLimits", "AnalystQuotaExceeded", "AnalystUsage", "QueryNotLive", "TokenRow"]
