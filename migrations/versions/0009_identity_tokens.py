"""Identity tokens: the issuer's token a device registered with (docs/identities.md).

Revision ID: 0009_identity_tokens
Revises: 0008
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("identity_token", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("identity_token")
