"""Per-round sampling secret: devices' Bernoulli coins are HMAC-SHA256(secret, device id), so every process
and every restart draws the same coin for a (round, device).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.add_column(sa.Column("sampling_secret", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.drop_column("sampling_secret")
