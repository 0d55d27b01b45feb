"""The deployments' and their SLO targets' SQL."""

from __future__ import annotations

from sqlalchemy import or_, select

from vigil.platform.control.db import NamedRepository
from vigil.platform.control.deployments.tables import SLO, Deployment
from vigil.platform.control.versions.tables import ModelVersion


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
