"""Many server processes over one database: a process registry, query leases, devices' availability and
assignments (so any process can take a check-in and any process can form a cohort), and stored live progress.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "processes",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("heartbeat_at", sa.Float(), nullable=False, index=True),
        sa.Column("stopped", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("load", sa.JSON(), nullable=True),
    )
    op.create_table(
        "device_presence",
        sa.Column("device_id", sa.String(64), primary_key=True),
        sa.Column("available_until", sa.Float(), nullable=False, index=True),
        sa.Column("cohort_id", sa.String(32), nullable=True, index=True),
        sa.Column("assignment", sa.JSON(), nullable=True),
    )
    with op.batch_alter_table("queries") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(32), nullable=True))
        batch.add_column(sa.Column("lease_expires", sa.Float(), nullable=True))
        batch.add_column(sa.Column("progress", sa.JSON(), nullable=True))
        batch.create_index("ix_queries_lease_owner", ["lease_owner"])
    with op.batch_alter_table("cohorts") as batch:
        batch.add_column(sa.Column("owner", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cohorts") as batch:
        batch.drop_column("owner")
    with op.batch_alter_table("queries") as batch:
        batch.drop_index("ix_queries_lease_owner")
        batch.drop_column("progress")
        batch.drop_column("lease_expires")
        batch.drop_column("lease_owner")
    op.drop_table("device_presence")
    op.drop_table("processes")
