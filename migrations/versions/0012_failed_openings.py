"""Failed openings: which devices contributed to each cohort whose sum failed the opening check (the group
testing that names a device masking another vector than it proved), and how many runs of a query's (ε, δ) its
charge covers (docs/validation.md, "A failed opening").

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "failed_sums",
        sa.Column("cohort_id", sa.String(32), sa.ForeignKey("cohorts.id"), primary_key=True),
        sa.Column("device_id", sa.String(32), sa.ForeignKey("devices.id"), primary_key=True),
        sa.Column("query_id", sa.String(32), sa.ForeignKey("queries.id"), nullable=False, index=True),
        sa.Column("round_index", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("privacy_charges") as batch:
        batch.add_column(sa.Column("runs", sa.Integer(), nullable=False, server_default="1"))


def downgrade() -> None:
    with op.batch_alter_table("privacy_charges") as batch:
        batch.drop_column("runs")
    op.drop_table("failed_sums")
