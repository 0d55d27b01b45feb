"""outbox messages carry the identity of the alert they report

Each outbox message stores the fingerprint of its alert, so that one alert's messages go
to a webhook in the order they were written (a resolve never overtakes its firing); a
message with none (a test event) is not ordered. Messages still owed when it runs get
the fingerprint their payload carries.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_outbox") as batch:
        batch.add_column(sa.Column("alert_fingerprint", sa.String(length=32), nullable=True))
    op.create_index(
        "ix_webhook_outbox_alert", "webhook_outbox", ["webhook_id", "alert_fingerprint"]
    )
    outbox = sa.table(
        "webhook_outbox",
        sa.column("id", sa.Integer()),
        sa.column("event", sa.String()),
        sa.column("payload", sa.JSON()),
        sa.column("alert_fingerprint", sa.String()),
        sa.column("delivered_at", sa.DateTime(timezone=True)),
        sa.column("gave_up_at", sa.DateTime(timezone=True)),
    )
    bind = op.get_bind()
    owed = bind.execute(
        sa.select(outbox.c.id, outbox.c.payload)
        .where(outbox.c.delivered_at.is_(None), outbox.c.gave_up_at.is_(None))
        .where(outbox.c.event != "test")
    ).all()
    for message_id, payload in owed:
        fingerprint = (payload or {}).get("fingerprint")
        if isinstance(fingerprint, str):
            bind.execute(
                sa.update(outbox)
                .where(outbox.c.id == message_id)
                .values(alert_fingerprint=fingerprint[:32])
            )


def downgrade() -> None:
    op.drop_index("ix_webhook_outbox_alert", table_name="webhook_outbox")
    with op.batch_alter_table("webhook_outbox") as batch:
        batch.drop_column("alert_fingerprint")
