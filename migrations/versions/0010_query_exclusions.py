"""Query exclusions: devices left out of a query's later cohorts after their validity proof was refused
(docs/validation.md, "Cheaters").

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "query_exclusions",
        sa.Column("query_id", sa.String(32), sa.ForeignKey("queries.id"), primary_key=True),
        sa.Column("device_id", sa.String(32), sa.ForeignKey("devices.id"), primary_key=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("query_exclusions")
