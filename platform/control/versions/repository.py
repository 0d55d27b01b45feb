"""The models' and versions' SQL."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from vigil.platform.control.db import NamedRepository, Repository
from vigil.platform.control.versions.tables import Model, ModelVersion


class ModelRepository(NamedRepository[Model]):
    row_type = Model
    name_column = Model.name


class ModelVersionRepository(Repository[ModelVersion]):
    async def get(self, model: str, version: str) -> ModelVersion | None:
        stmt = select(ModelVersion).where(
            ModelVersion.model == model, ModelVersion.version == version
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def by_ids(self, ids: set[int]) -> dict[int, ModelVersion]:
        if not ids:
            return {}
        stmt = select(ModelVersion).where(ModelVersion.id.in_(ids))
        return {row.id: row for row in (await self.session.execute(stmt)).scalars()}

    async def list(self, model: str | None = None) -> Sequence[ModelVersion]:
        """Oldest first within each model; every model's when `model` is None."""
        stmt = select(ModelVersion).order_by(ModelVersion.model, ModelVersion.created_at)
        if model is not None:
            stmt = stmt.where(ModelVersion.model == model)
        return (await self.session.execute(stmt)).scalars().all()
