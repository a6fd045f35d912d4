"""Uncertainty of a result: per released noisy value its noise std and 95 % interval, and the warnings the
analyst must read (both returned by GET /v1/queries/{id}/result beside the result).

Revision ID: 0008_uncertainty
Revises: 0007
Create Date: 2026-12-15
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("queries") as batch:
        batch.add_column(sa.Column("uncertainty", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("warnings", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queries") as batch:
        batch.drop_column("warnings")
        batch.drop_column("uncertainty")
