"""Privacy-budget ledger: per-source totals set by an admin, and one charge per noisy query.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "privacy_budgets",
        sa.Column("source", sa.String(128), primary_key=True),
        sa.Column("total_epsilon", sa.Float(), nullable=False),
        sa.Column("total_delta", sa.Float(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "privacy_charges",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(128), nullable=False),
        sa.Column("query_id", sa.String(32), sa.ForeignKey("queries.id"), nullable=False, unique=True),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("refunded_at", TS, nullable=True),
    )
    op.create_index("ix_privacy_charges_source", "privacy_charges", ["source"])


def downgrade() -> None:
    op.drop_index("ix_privacy_charges_source", table_name="privacy_charges")
    op.drop_table("privacy_charges")
    op.drop_table("privacy_budgets")
