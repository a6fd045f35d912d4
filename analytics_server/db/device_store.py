"""Registered devices (public key, identity token) and the request nonces that make a signed request one-shot."""

from __future__ import annotations

from sqlalchemy import delete, select

from analytics_server.db.base import Database, rowcount, run_to_completion, utc
from analytics_server.db.models import Device, Nonce
from fa_common.clock import Clock


@run_to_completion
class Devices:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def register(self, device_id: str, public_key: bytes, identity_token: bytes | None = None) -> None:
        """Insert the device; registering again only adds a token it did not have (a token is never replaced)."""
        async with self.db.tx() as s:
            row = await s.get(Device, device_id)
            if row is None:
                s.add(Device(id=device_id, public_key=public_key, created_at=utc(self.clock), identity_token=identity_token))
            elif row.identity_token is None and identity_token is not None:
                row.identity_token = identity_token

    async def key(self, device_id: str) -> bytes | None:
        return (await self.identity(device_id))[0]

    async def identity(self, device_id: str) -> tuple[bytes | None, bytes | None]:
        """(public key, identity token) of a device; (None, None) when unknown."""
        async with self.db.sessions() as s:
            row = await s.get(Device, device_id)
        return (None, None) if row is None else (row.public_key, row.identity_token)

    async def keys(self, device_ids: list[str]) -> dict[str, tuple[bytes, bytes | None]]:
        """Per device: (public key, identity token or None)."""
        async with self.db.sessions() as s:
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
            self.db.upsert()(Nonce.__table__)  # the Core table: the ORM's bulk-values path costs ~10× more per row
            .values([{"device_id": d, "nonce": n, "expires_at": e} for d, n, e in rows])
            .on_conflict_do_nothing(index_elements=["device_id", "nonce"])
            .returning(Nonce.__table__.c.device_id, Nonce.__table__.c.nonce)
        )
        async with self.db.tx() as s:
            inserted = (await s.execute(stmt)).all()
        return {(d, n) for d, n in inserted}

    async def prune_nonces(self, now_ts: float) -> int:
        """Delete nonces whose expiry passed: no request carrying them passes the timestamp check any more."""
        async with self.db.tx() as s:
            return rowcount(await s.execute(delete(Nonce).where(Nonce.expires_at < now_ts)))


__all__ = ["Devices"]
