"""Analyst tenancy and ledger edges: per-token ε quota, cohorts that closed their masked-input phase, the
ledger lock rows, and an index on the query owner.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("cohorts") as batch:
        batch.add_column(sa.Column("masked_input_closed", sa.Boolean(), nullable=False, server_default=sa.false()))
    # cohorts that finished certainly closed their masked-input phase (phase ≥ 3: consistency check or later)
    op.execute("UPDATE cohorts SET masked_input_closed = TRUE WHERE status = 'finished' OR phase >= 3")
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("epsilon_quota", sa.Float(), nullable=True))
    op.create_index("ix_queries_created_by", "queries", ["created_by"])
    op.create_table("ledger_locks", sa.Column("name", sa.String(160), primary_key=True))


def downgrade() -> None:
    op.drop_table("ledger_locks")
    op.drop_index("ix_queries_created_by", table_name="queries")
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("epsilon_quota")
    with op.batch_alter_table("cohorts") as batch:
        batch.drop_column("masked_input_closed")
