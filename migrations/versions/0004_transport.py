"""Transport hardening: nonces keyed by (device, nonce) with an expiry time; token display prefixes.

The nonce table used to hold "device:nonce" with its receive time and was pruned by receive time; it now
holds each nonce until max(received, timestamp) + window, so a future-stamped request cannot be replayed
after its nonce is pruned. Existing rows are carried over with a one-day expiry (longer than any sensible
signature window). `tokens.prefix` holds the first characters of new tokens for `fa-server token list`
and `token revoke PREFIX`; tokens created before have none (revoke them by id).

Revision ID: 0004
Revises: 0002
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0002"
branch_labels = None
depends_on = None

CARRY_OVER_S = 86400.0


def _nonce_table(name: str, version: int) -> sa.TableClause:
    if version == 1:
        return sa.table(name, sa.column("key", sa.String), sa.column("ts", sa.Float))
    return sa.table(name, sa.column("device_id", sa.String), sa.column("nonce", sa.String), sa.column("expires_at", sa.Float))


def upgrade() -> None:
    conn = op.get_bind()
    v1 = _nonce_table("nonces", 1)
    rows: dict[tuple[str, str], float] = {}
    for key, ts in conn.execute(sa.select(v1.c.key, v1.c.ts)):
        device_id, sep, nonce = key.rpartition(":")
        if sep and device_id and nonce:
            rows[(device_id[:64], nonce[:64])] = ts + CARRY_OVER_S
    op.drop_index("ix_nonces_ts", table_name="nonces")
    op.drop_table("nonces")
    op.create_table(
        "nonces",
        sa.Column("device_id", sa.String(64), primary_key=True),
        sa.Column("nonce", sa.String(64), primary_key=True),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_nonces_expires_at", "nonces", ["expires_at"])
    if rows:
        conn.execute(sa.insert(_nonce_table("nonces", 2)),
                     [{"device_id": d, "nonce": n, "expires_at": e} for (d, n), e in rows.items()])
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("prefix", sa.String(16), nullable=True))
        batch.create_index("ix_tokens_prefix", ["prefix"])


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_index("ix_tokens_prefix")
        batch.drop_column("prefix")
    conn = op.get_bind()
    v2 = _nonce_table("nonces", 2)
    rows = [{"key": f"{d}:{n}", "ts": e} for d, n, e in conn.execute(sa.select(v2.c.device_id, v2.c.nonce, v2.c.expires_at))]
    op.drop_index("ix_nonces_expires_at", table_name="nonces")
    op.drop_table("nonces")
    op.create_table(
        "nonces",
        sa.Column("key", sa.String(120), primary_key=True),
        sa.Column("ts", sa.Float(), nullable=False),
    )
    op.create_index("ix_nonces_ts", "nonces", ["ts"])
    if rows:
        conn.execute(sa.insert(_nonce_table("nonces", 1)), rows)
