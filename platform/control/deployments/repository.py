"""The deployments' and their SLO targets' SQL."""

from __future__ import annotations

from sqlalchemy import or_, select

from vigil.platform.control.db import NamedRepository
from vigil.platform.control.deployments.tables import SLO, Deployment, StableHistoryEntry
from vigil.platform.control.versions.tables import ModelVersion

ROLLBACK = "deployment.rollback"  # the audit action of a roll back


class DeploymentRepository(NamedRepository[Deployment]):
    row_type = Deployment
    name_column = Deployment.name

    async def names(self) -> set[str]:
        return set((await self.session.execute(select(Deployment.name))).scalars())

    async def models_served(self) -> set[str]:
        """Names of the models some deployment serves a version of as stable."""
        stmt = select(ModelVersion.model).join(
            Deployment, Deployment.stable_version_id == ModelVersion.id
        )
        return set((await self.session.execute(stmt)).scalars())

    async def serving(self, version_id: int) -> list[str]:
        """Names of the deployments that serve this version, as stable or canary."""
        stmt = (
            select(Deployment.name)
            .where(
                or_(
                    Deployment.stable_version_id == version_id,
                    Deployment.canary_version_id == version_id,
                )
            )
            .order_by(Deployment.name)
        )
        return list((await self.session.execute(stmt)).scalars().all())

    async def slos(self, deployment_ids: set[int]) -> dict[int, SLO]:
        if not deployment_ids:
            return {}
        stmt = select(SLO).where(SLO.deployment_id.in_(deployment_ids))
        return {row.deployment_id: row for row in (await self.session.execute(stmt)).scalars()}

    async def stable_history(self, deployment_id: int, limit: int) -> list[StableHistoryEntry]:
        stmt = (
            select(StableHistoryEntry)
            .where(StableHistoryEntry.deployment_id == deployment_id)
            .order_by(StableHistoryEntry.id.desc())
            .limit(limit)
        )
        return list((await self.session.execute(stmt)).scalars().all())

    async def restorable(self, row: Deployment) -> StableHistoryEntry | None:
        """The stable version a roll back without a canary restores: the newest replaced
        one that no roll back replaced nor restored, and that is not stable now."""
        stmt = (
            select(StableHistoryEntry)
            .where(
                StableHistoryEntry.deployment_id == row.id,
                StableHistoryEntry.action != ROLLBACK,
                StableHistoryEntry.restored_at.is_(None),
                StableHistoryEntry.version_id != row.stable_version_id,
            )
            .order_by(StableHistoryEntry.id.desc())
            .limit(1)
        )
        return (await self.session.execute(stmt)).scalars().first()
