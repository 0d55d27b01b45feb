"""each deployment's history of stable versions

A row per stable version that a write replaced (promote, an edit of stable, a roll back),
with the deployment's revision while it served and who replaced it. A roll back without
a canary restores the newest one not yet restored. Deployments promoted before this
revision have no history: their first roll back finds nothing to restore.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deployment_stable_history",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("deployment_id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=100), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("replaced_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("restored_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["deployment_id"],
            ["deployments.id"],
            name=op.f("fk_deployment_stable_history_deployment_id_deployments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name=op.f("fk_deployment_stable_history_version_id_model_versions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployment_stable_history")),
    )
    op.create_index(
        op.f("ix_deployment_stable_history_deployment_id"),
        "deployment_stable_history",
        ["deployment_id"],
    )


def downgrade() -> None:
    op.drop_index(
        op.f("ix_deployment_stable_history_deployment_id"),
        table_name="deployment_stable_history",
    )
    op.drop_table("deployment_stable_history")
