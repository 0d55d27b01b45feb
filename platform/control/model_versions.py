"""Model versions: the repository holds the SQL, the service the rules."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.platform.control.tables import ModelVersion


class VersionStatus(StrEnum):
    REGISTERED = "registered"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class ModelVersionRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, model: str, version: str) -> ModelVersion | None:
        stmt = select(ModelVersion).where(
            ModelVersion.model == model, ModelVersion.version == version
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def list(self) -> Sequence[ModelVersion]:
        stmt = select(ModelVersion).order_by(ModelVersion.model, ModelVersion.version)
        return (await self.session.execute(stmt)).scalars().all()


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
        """Create the version if new, else update where it loads from and its status."""
        async with self._sessions.begin() as session:
            repo = ModelVersionRepository(session)
            row = await repo.get(model, version)
            if row is None:
                row = ModelVersion(
                    model=model,
                    version=version,
                    kind=kind,
                    format=format,
                    source=source,
                    status=status.value,
                    error=error,
                )
                session.add(row)
            else:
                row.kind, row.format, row.source = kind, format, source
                row.status, row.error = status.value, error

    async def list(self) -> Sequence[ModelVersion]:
        async with self._sessions() as session:
            return await ModelVersionRepository(session).list()
