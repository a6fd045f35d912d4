"""Bearer tokens (analyst, admin, metrics): created, looked up by hash, listed, revoked; each token's own ε quota and
what it holds (its active queries and the ε its charged queries spent)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from analytics_server.db.base import Database, run_to_completion, utc
from analytics_server.db.models import Event, PrivacyCharge, Query, Token
from fa_common.clock import Clock

ROLES = ("analyst", "admin", "metrics")
"""`metrics` may only read `/metrics` (for a Prometheus scraper)."""
TOKEN_PREFIX_CHARS = 10
"""Characters of a token kept in clear ("fa_" + 7 random ones, 42 of its 256 random bits) to name it."""
ACTIVE = ("pending", "running")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TokenInfo:
    id: int
    role: str


@dataclass(frozen=True)
class TokenRow:
    """A token as `fa-server token list` shows it (never the token itself: only its hash is stored)."""

    id: int
    prefix: str | None
    role: str
    label: str | None
    created_at: datetime
    revoked: bool


@run_to_completion
class Tokens:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def create(self, role: str, label: str | None = None) -> str:
        if role not in ROLES:
            raise ValueError(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
        token = "fa_" + secrets.token_urlsafe(32)
        async with self.db.tx() as s:
            s.add(Token(token_hash=hash_token(token), prefix=token[:TOKEN_PREFIX_CHARS], role=role, label=label,
                        revoked=False, created_at=utc(self.clock)))
        return token

    async def lookup(self, token: str) -> TokenInfo | None:
        async with self.db.sessions() as s:
            row = (await s.execute(select(Token).where(Token.token_hash == hash_token(token)))).scalar_one_or_none()
        if row is None or row.revoked:
            return None
        return TokenInfo(row.id, row.role)

    async def get(self, token_id: int) -> TokenInfo | None:
        async with self.db.sessions() as s:
            row = await s.get(Token, token_id)
        return None if row is None else TokenInfo(row.id, row.role)

    async def all_rows(self) -> list[TokenRow]:
        async with self.db.sessions() as s:
            rows = (await s.execute(select(Token).order_by(Token.id))).scalars()
            return [TokenRow(r.id, r.prefix, r.role, r.label, r.created_at, r.revoked) for r in rows]

    async def revoke(self, id_or_prefix: str) -> TokenRow:
        """Mark one token revoked, named by its id or by a prefix of the token that matches exactly one
        token. Raises LookupError (no match, or an ambiguous prefix). Revoking twice is harmless."""
        async with self.db.tx() as s:
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
                s.add(Event(type="token.revoked", data={"token_id": row.id}, created_at=utc(self.clock)))
            return TokenRow(row.id, row.prefix, row.role, row.label, row.created_at, True)

    async def set_quota(self, token_id: int, epsilon: float | None) -> bool:
        """Set (or with None clear) a token's own ε quota; False when there is no such token."""
        async with self.db.tx([f"analyst:{token_id}"]) as s:
            token = await s.get(Token, token_id)
            if token is None:
                return False
            token.epsilon_quota = epsilon
            s.add(Event(type="quota.set", data={"token_id": token_id, "epsilon": epsilon}, created_at=utc(self.clock)))
        return True

    async def holdings(self, s: AsyncSession, token_id: int, since: float | None) -> tuple[float | None, float, int]:
        """(the token's own ε quota or None, ε of its charged queries charged since `since` (unix seconds; None:
        ever), its pending + running queries), read in the caller's transaction."""
        token = await s.get(Token, token_id)
        own = None if token is None else token.epsilon_quota
        active = (await s.execute(
            select(func.count()).select_from(Query).where(Query.created_by == token_id, Query.status.in_(ACTIVE))
        )).scalar_one()
        used_q = (
            select(func.coalesce(func.sum(PrivacyCharge.epsilon), 0.0))
            .join(Query, Query.id == PrivacyCharge.query_id)
            .where(Query.created_by == token_id, PrivacyCharge.status == "charged")
        )
        if since is not None:
            used_q = used_q.where(PrivacyCharge.created_at >= datetime.fromtimestamp(since, timezone.utc))
        return own, float((await s.execute(used_q)).scalar_one()), int(active)

    async def read_holdings(self, token_id: int, since: float | None) -> tuple[float | None, float, int]:
        """`holdings` in a read of its own."""
        async with self.db.sessions() as s:
            return await self.holdings(s, token_id, since)


__all__ = ["ROLES", "TOKEN_PREFIX_CHARS", "TokenInfo", "TokenRow", "Tokens", "hash_token"]
