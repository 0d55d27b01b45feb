"""shadow versions: a deployment may mirror a share of its requests to a version whose
answers are discarded, to compare its SLIs with the stable version's

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.add_column(sa.Column("shadow_version_id", sa.Integer(), nullable=True))
        batch.add_column(
            sa.Column("shadow_weight", sa.Integer(), nullable=False, server_default="0")
        )
        batch.create_foreign_key(
            op.f("fk_deployments_shadow_version_id_model_versions"),
            "model_versions",
            ["shadow_version_id"],
            ["id"],
        )


def downgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.drop_constraint(
            op.f("fk_deployments_shadow_version_id_model_versions"), type_="foreignkey"
        )
        batch.drop_column("shadow_weight")
        batch.drop_column("shadow_version_id")
