"""control plane: models, deployments, SLOs, webhooks, users, audit log, replicas

Model versions gain a foreign key to their model (backfilled: one `models` row per
distinct model name), the artifact they were registered with (backfilled from `source`),
a checksum and their params.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("description", sa.String(length=2000), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
        sa.UniqueConstraint("name", name=op.f("uq_models_name")),
    )
    _extend_model_versions()
    op.create_table(
        "deployments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("stable_version_id", sa.Integer(), nullable=False),
        sa.Column("canary_version_id", sa.Integer(), nullable=True),
        sa.Column("canary_weight", sa.Integer(), nullable=False),
        sa.Column("max_prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("max_tokens", sa.Integer(), nullable=True),
        sa.Column("limits", sa.JSON(), nullable=False),
        sa.Column("fallback_deployment", sa.String(length=200), nullable=True),
        sa.Column("fallback_trigger", sa.String(length=20), nullable=True),
        sa.Column("fallback_threshold_s", sa.Float(), nullable=True),
        sa.Column("long_prompt_min_tokens", sa.Integer(), nullable=True),
        sa.Column("long_prompt_max_queue", sa.Integer(), nullable=True),
        sa.Column("long_prompt_max_num_seqs", sa.Integer(), nullable=True),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["stable_version_id"],
            ["model_versions.id"],
            name=op.f("fk_deployments_stable_version_id_model_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["canary_version_id"],
            ["model_versions.id"],
            name=op.f("fk_deployments_canary_version_id_model_versions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployments")),
        sa.UniqueConstraint("name", name=op.f("uq_deployments_name")),
    )
    op.create_table(
        "slos",
        sa.Column("deployment_id", sa.Integer(), nullable=False),
        sa.Column("ttft_p99_s", sa.Float(), nullable=False),
        sa.Column("min_tokens_per_s", sa.Float(), nullable=False),
        sa.Column("batch_shed_fraction", sa.Float(), nullable=False),
        sa.Column("availability_target", sa.Float(), nullable=False),
        sa.Column("window_s", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["deployment_id"], ["deployments.id"], name=op.f("fk_slos_deployment_id_deployments")
        ),
        sa.PrimaryKeyConstraint("deployment_id", name=op.f("pk_slos")),
    )
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("secret", sa.String(length=200), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
        sa.UniqueConstraint("name", name=op.f("uq_webhooks_name")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(length=200), nullable=False),
        sa.Column("password_hash", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("username", name=op.f("uq_users_username")),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=100), nullable=False),
        sa.Column("entity_type", sa.String(length=50), nullable=False),
        sa.Column("entity_name", sa.String(length=400), nullable=False),
        sa.Column("before", sa.Text(), nullable=True),
        sa.Column("after", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(
        op.f("ix_audit_log_entity"), "audit_log", ["entity_type", "entity_name"], unique=False
    )
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("address", sa.String(length=500), nullable=False),
        sa.Column("device", sa.String(length=100), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("versions", sa.JSON(), nullable=False),
        sa.Column("stats", sa.JSON(), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replicas")),
    )


def _extend_model_versions() -> None:
    # Added nullable, backfilled, then made NOT NULL: rows recorded before this revision
    # get a model row each and keep loading from where they did.
    with op.batch_alter_table("model_versions") as batch:
        batch.add_column(sa.Column("model_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("artifact", sa.String(length=1000), nullable=True))
        batch.add_column(sa.Column("checksum", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("params", sa.JSON(), nullable=True))
    op.execute(
        "INSERT INTO models (name, kind, created_at) "
        "SELECT model, MIN(kind), MIN(created_at) FROM model_versions GROUP BY model"
    )
    op.execute(
        "UPDATE model_versions SET "
        "model_id = (SELECT models.id FROM models WHERE models.name = model_versions.model), "
        "artifact = source, params = '{}'"
    )
    with op.batch_alter_table("model_versions") as batch:
        batch.alter_column("model_id", existing_type=sa.Integer(), nullable=False)
        batch.alter_column("artifact", existing_type=sa.String(length=1000), nullable=False)
        batch.alter_column("params", existing_type=sa.JSON(), nullable=False)
        batch.create_foreign_key(
            op.f("fk_model_versions_model_id_models"), "models", ["model_id"], ["id"]
        )


def downgrade() -> None:
    op.drop_table("replicas")
    op.drop_index(op.f("ix_audit_log_entity"), table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_table("users")
    op.drop_table("webhooks")
    op.drop_table("slos")
    op.drop_table("deployments")
    with op.batch_alter_table("model_versions") as batch:
        batch.drop_constraint(op.f("fk_model_versions_model_id_models"), type_="foreignkey")
        batch.drop_column("params")
        batch.drop_column("checksum")
        batch.drop_column("artifact")
        batch.drop_column("model_id")
    op.drop_table("models")
