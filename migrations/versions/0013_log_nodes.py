"""The transparency log's Merkle tree in the database (issue 47): the hash of every complete subtree above the
leaves (`log_nodes`, written with the leaf that completes it), so a server process reads O(log n) nodes per root
or proof instead of holding every leaf. Backfilled from the existing leaves, a batch at a time.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from translog.merkle import CompactRange

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

BATCH = 20_000
"""Leaves read (and their completed nodes written) per statement while backfilling."""


def upgrade() -> None:
    op.create_table(
        "log_nodes",
        sa.Column("level", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("idx", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("hash", sa.LargeBinary(32), nullable=False),
    )
    entries = sa.table("log_entries", sa.column("idx", sa.BigInteger()), sa.column("leaf_hash", sa.LargeBinary()))
    nodes = sa.table("log_nodes", sa.column("level", sa.Integer()), sa.column("idx", sa.BigInteger()),
                     sa.column("hash", sa.LargeBinary()))
    bind = op.get_bind()
    edge = CompactRange()
    while True:
        rows = bind.execute(sa.select(entries.c.idx, entries.c.leaf_hash).where(entries.c.idx >= edge.size)
                            .order_by(entries.c.idx).limit(BATCH)).all()
        if not rows:
            return
        made = []
        for idx, h in rows:
            if idx != edge.size:
                raise RuntimeError(f"log_entries: entry {edge.size} is missing (the next is {idx}); the log's tree "
                                   "cannot be built")
            made += [{"level": level, "idx": i, "hash": node} for level, i, node in edge.append(bytes(h))]
        if made:
            bind.execute(nodes.insert(), made)


def downgrade() -> None:
    op.drop_table("log_nodes")
