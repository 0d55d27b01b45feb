"""a user's console sessions can be ended all at once

Each user has a session epoch that every console session records at sign-in; a session
of another epoch is signed out at its next request. A password change, disabling the
user and "sign out everywhere" move the epoch on. Users that exist when it runs start at
0, as the sessions signed in before it (which recorded none) are taken to be.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(
            sa.Column("session_epoch", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("session_epoch")
