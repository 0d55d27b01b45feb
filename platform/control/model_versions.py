"""Models and their versions: the repositories hold the SQL; `ModelVersionService`
records what the worker reports about loading a version (the admin rules are in
catalog.py)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.platform.control.audit import AuditRepository
from vigil.platform.control.tables import Deployment, Model, ModelVersion


class VersionStatus(StrEnum):
    REGISTERED = "registered"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    RETIRED = "retired"  # kept for the record; no deployment may use it


class ModelRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, name: str) -> Model | None:
        stmt = select(Model).where(Model.name == name)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def list(self) -> Sequence[Model]:
        return (await self.session.execute(select(Model).order_by(Model.name))).scalars().all()

    def add(self, row: Model) -> None:
        self.session.add(row)


class ModelVersionRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

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

    async def users(self, version_id: int) -> list[str]:
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

    async def list(self, model: str | None = None) -> Sequence[ModelVersion]:
        stmt = select(ModelVersion).order_by(ModelVersion.model, ModelVersion.created_at)
        if model is not None:
            stmt = stmt.where(ModelVersion.model == model)
        return (await self.session.execute(stmt)).scalars().all()

    def add(self, row: ModelVersion) -> None:
        self.session.add(row)


class ModelVersionService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def record(
        self,
        *,
        model: str,
        version: str,
        kind: str,
        format: str,
        source: str,
        status: VersionStatus,
        error: str | None = None,
    ) -> None:
        """The worker's news about loading a version: where it loaded from and how it
        went. A version nobody registered (a worker started without the control plane)
        is registered here, with `source` as its artifact; a retired version stays
        retired. Status changes are operational state, not admin writes: only the
        registration is audited."""
        async with self._sessions.begin() as session:
            row = await ModelVersionRepository(session).get(model, version)
            if row is None:
                model_row = await _model_row(session, model, kind)
                row = ModelVersion(
                    model_id=model_row.id,
                    model=model,
                    version=version,
                    kind=kind,
                    format=format,
                    artifact=source,
                    params={},
                    source=source,
                    status=status.value,
                    error=error,
                )
                session.add(row)
                after = {"model": model, "version": version, "artifact": source, "kind": kind}
                AuditRepository(session).add(
                    "system", "version.register", "version", f"{model}@{version}", None, after
                )
                return
            row.source, row.error = source, error
            if row.status != VersionStatus.RETIRED:
                row.status = status.value

    async def list(self) -> Sequence[ModelVersion]:
        async with self._sessions() as session:
            return await ModelVersionRepository(session).list()


async def _model_row(session: AsyncSession, name: str, kind: str) -> Model:
    repo = ModelRepository(session)
    row = await repo.get(name)
    if row is None:
        row = Model(name=name, kind=kind)
        repo.add(row)
        await session.flush()
    return row
