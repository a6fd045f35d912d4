"""Indexes of the keyset pages (docs/server.md, "Paging"; analytics_server/db/reports.py): GET /v1/queries reads
queries newest first by (created_at, id), an analyst's own (created_by = ?) or all of them; a source's charges are
read by id within the source (GET /v1/budgets/{source}/charges), and the budgets list walks the charges' source
names. Each page is then an index range scan, whatever the table's size. The composite indexes replace the
single-column ones they start with.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_queries_created_by_created_at", "queries", ["created_by", "created_at", "id"])
    op.create_index("ix_queries_created_at", "queries", ["created_at", "id"])
    op.drop_index("ix_queries_created_by", table_name="queries")
    op.create_index("ix_privacy_charges_source_id", "privacy_charges", ["source", "id"])
    op.drop_index("ix_privacy_charges_source", table_name="privacy_charges")


def downgrade() -> None:
    op.create_index("ix_privacy_charges_source", "privacy_charges", ["source"])
    op.drop_index("ix_privacy_charges_source_id", table_name="privacy_charges")
    op.create_index("ix_queries_created_by", "queries", ["created_by"])
    op.drop_index("ix_queries_created_at", table_name="queries")
    op.drop_index("ix_queries_created_by_created_at", table_name="queries")
