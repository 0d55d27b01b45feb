"""alerts, decisions, and the webhook outbox with its delivery log

Alerts have a lifecycle (firing, resolved); every automatic decision is a row with the
numbers behind it; a webhook message is written to the outbox in the transaction of the
change it reports and delivered from there. Webhooks gain a payload format; SLOs gain
the canary auto-rollback settings.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=32), nullable=False),
        sa.Column("deployment", sa.String(length=200), nullable=False),
        sa.Column("sli", sa.String(length=40), nullable=False),
        sa.Column("severity", sa.String(length=20), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("summary", sa.String(length=2000), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alerts")),
    )
    op.create_index("ix_alerts_fingerprint_state", "alerts", ["fingerprint", "state"])
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deployment", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("decision", sa.String(length=40), nullable=False),
        sa.Column("reason", sa.String(length=2000), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decisions")),
    )
    op.create_index(op.f("ix_decisions_at"), "decisions", ["at"])
    op.create_index(op.f("ix_decisions_deployment"), "decisions", ["deployment"])
    with op.batch_alter_table("slos") as batch:
        batch.add_column(
            sa.Column("auto_rollback", sa.Boolean(), nullable=False, server_default=sa.true())
        )
        batch.add_column(
            sa.Column("rollback_min_requests", sa.Integer(), nullable=False, server_default="50")
        )
        batch.add_column(
            sa.Column("rollback_margin", sa.Float(), nullable=False, server_default="0.05")
        )
    with op.batch_alter_table("webhooks") as batch:
        batch.add_column(
            sa.Column(
                "format",
                sa.String(length=40),
                nullable=False,
                server_default="alertmanager_webhook",
            )
        )
    op.create_table(
        "webhook_outbox",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sa.String(length=36), nullable=False),
        sa.Column("webhook_id", sa.Integer(), nullable=False),
        sa.Column("event", sa.String(length=40), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("num_attempts", sa.Integer(), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("gave_up_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhooks.id"],
            name=op.f("fk_webhook_outbox_webhook_id_webhooks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_outbox")),
        sa.UniqueConstraint("delivery_id", name=op.f("uq_webhook_outbox_delivery_id")),
    )
    op.create_index(
        "ix_webhook_outbox_pending", "webhook_outbox", ["delivered_at", "next_attempt_at"]
    )
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("message_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("error", sa.String(length=2000), nullable=True),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["webhook_outbox.id"],
            name=op.f("fk_webhook_attempts_message_id_webhook_outbox"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_attempts")),
    )
    op.create_index(op.f("ix_webhook_attempts_message_id"), "webhook_attempts", ["message_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_webhook_attempts_message_id"), table_name="webhook_attempts")
    op.drop_table("webhook_attempts")
    op.drop_index("ix_webhook_outbox_pending", table_name="webhook_outbox")
    op.drop_table("webhook_outbox")
    with op.batch_alter_table("webhooks") as batch:
        batch.drop_column("format")
    with op.batch_alter_table("slos") as batch:
        batch.drop_column("rollback_margin")
        batch.drop_column("rollback_min_requests")
        batch.drop_column("auto_rollback")
    op.drop_index(op.f("ix_decisions_deployment"), table_name="decisions")
    op.drop_index(op.f("ix_decisions_at"), table_name="decisions")
    op.drop_table("decisions")
    op.drop_index("ix_alerts_fingerprint_state", table_name="alerts")
    op.drop_table("alerts")
