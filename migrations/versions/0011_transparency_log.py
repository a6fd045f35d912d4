"""The public transparency log (docs/transparency.md): entries, signed heads, witness cosignatures, and the
database-kept log key of servers without FA_LOG_KEY_FILE.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "log_entries",
        sa.Column("idx", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("query_id", sa.String(32), nullable=True, index=True),
        sa.Column("cohort_id", sa.String(32), nullable=True, index=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("leaf_hash", sa.LargeBinary(32), nullable=False),
    )
    op.create_table(
        "log_heads",
        sa.Column("size", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("root", sa.LargeBinary(32), nullable=False),
        sa.Column("timestamp_ms", sa.BigInteger(), nullable=False),
        sa.Column("origin", sa.String(200), nullable=False),
        sa.Column("key_id", sa.String(16), nullable=False),
        sa.Column("signature", sa.LargeBinary(64), nullable=False),
    )
    op.create_table(
        "log_cosignatures",
        sa.Column("size", sa.BigInteger(), sa.ForeignKey("log_heads.size"), primary_key=True),
        sa.Column("key_id", sa.String(16), primary_key=True),
        sa.Column("witness", sa.String(100), nullable=False),
        sa.Column("time", sa.BigInteger(), nullable=False),
        sa.Column("signature", sa.LargeBinary(64), nullable=False),
    )
    op.create_table(
        "log_keys",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("seed", sa.LargeBinary(32), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("log_keys")
    op.drop_table("log_cosignatures")
    op.drop_table("log_heads")
    op.drop_table("log_entries")
