"""SLOs gain an admission target

An SLO's `shed` SLI gets its own objective: the share of interactive requests admitted
(not shed with a 429) over the window, 0.99 unless set. Stored SLOs keep the window they
were saved with: the 30-day default window applies to deployments created from now on.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("slos") as batch:
        batch.add_column(
            sa.Column("admission_target", sa.Float(), nullable=False, server_default="0.99")
        )


def downgrade() -> None:
    with op.batch_alter_table("slos") as batch:
        batch.drop_column("admission_target")
