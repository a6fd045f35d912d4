"""Initial schema: queries, rounds, cohorts, cohort members, devices, tokens, nonces, events.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "queries",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("source", sa.String(128), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("calibration", sa.JSON(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("current_round", sa.Integer(), nullable=False),
        sa.Column("rounds_upper_bound", sa.Integer(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("privacy", sa.JSON(), nullable=True),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
    )
    op.create_index("ix_queries_status", "queries", ["status"])
    op.create_table(
        "rounds",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("query_id", sa.String(32), sa.ForeignKey("queries.id"), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("noise", sa.JSON(), nullable=True),
        sa.Column("bits", sa.Integer(), nullable=False),
        sa.Column("need", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("aggregate", sa.LargeBinary(), nullable=False),
        sa.Column("contributors", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("decoded_at", TS, nullable=True),
        sa.UniqueConstraint("query_id", "index", name="uq_rounds_query_index"),
    )
    op.create_index("ix_rounds_query_id", "rounds", ["query_id"])
    op.create_table(
        "devices",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("public_key", sa.LargeBinary(), nullable=False, unique=True),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "cohorts",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("query_id", sa.String(32), sa.ForeignKey("queries.id"), nullable=False),
        sa.Column("round_id", sa.Integer(), sa.ForeignKey("rounds.id"), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("secagg", sa.JSON(), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("phase", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("contributors", sa.Integer(), nullable=False),
        sa.Column("sum", sa.LargeBinary(), nullable=True),
        sa.Column("dropped", sa.JSON(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
    )
    op.create_index("ix_cohorts_query_id", "cohorts", ["query_id"])
    op.create_index("ix_cohorts_round_id", "cohorts", ["round_id"])
    op.create_index("ix_cohorts_status", "cohorts", ["status"])
    op.create_table(
        "cohort_members",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("cohort_id", sa.String(32), sa.ForeignKey("cohorts.id"), nullable=False),
        sa.Column("round_id", sa.Integer(), sa.ForeignKey("rounds.id"), nullable=False),
        sa.Column("device_id", sa.String(32), sa.ForeignKey("devices.id"), nullable=False),
        sa.Column("party", sa.Integer(), nullable=False),
        sa.Column("contributed", sa.Boolean(), nullable=False),
        sa.UniqueConstraint("round_id", "device_id", name="uq_members_round_device"),
    )
    op.create_index("ix_cohort_members_cohort_id", "cohort_members", ["cohort_id"])
    op.create_index("ix_cohort_members_device_id", "cohort_members", ["device_id"])
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("revoked", sa.Boolean(), nullable=False),
    )
    op.create_table(
        "nonces",
        sa.Column("key", sa.String(120), primary_key=True),
        sa.Column("ts", sa.Float(), nullable=False),
    )
    op.create_index("ix_nonces_ts", "nonces", ["ts"])
    op.create_table(
        "events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("query_id", sa.String(32), nullable=True),
        sa.Column("cohort_id", sa.String(32), nullable=True),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_events_query", "events", ["query_id", "id"])


def downgrade() -> None:
    for table in ("events", "nonces", "tokens", "cohort_members", "cohorts", "devices", "rounds", "queries"):
        op.drop_table(table)
