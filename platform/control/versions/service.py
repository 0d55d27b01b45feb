"""The rules for models and versions: names, params and checksums are checked before a
row is written; a version is registered once and never changed; only a version no
deployment serves can be retired. Every admin write is audited and announced; what
workers report about loading a version is operational state, recorded unannounced."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.platform.control.audit.repository import AuditRepository
from vigil.platform.control.db import OnChange, Service, nothing_changed
from vigil.platform.control.deployments.repository import DeploymentRepository
from vigil.platform.control.names import check_name, check_version, must_exist, name_taken
from vigil.platform.control.specs import VersionRef, version_params
from vigil.platform.control.versions.checks import (
    check_artifact_place,
    check_params,
    infer_format,
    verified_checksum,
)
from vigil.platform.control.versions.records import (
    ModelRecord,
    VersionRecord,
    VersionStatus,
    version_snapshot,
)
from vigil.platform.control.versions.repository import ModelRepository, ModelVersionRepository
from vigil.platform.control.versions.tables import Model, ModelVersion
from vigil.platform.errors import Conflict, NotFound


class VersionService(Service):
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        on_change: OnChange = nothing_changed,
        model_dirs: Sequence[Path] = (),
    ) -> None:
        super().__init__(sessions, on_change)
        self._model_dirs = tuple(model_dirs)  # where registered artifacts may come from

    async def register_model(
        self, name: str, kind: ModelKind, description: str | None = None, *, actor: str
    ) -> ModelRecord:
        check_name(name, "a model")
        try:
            async with self._sessions.begin() as session:
                if await ModelRepository(session).get(name) is not None:
                    raise name_taken("model", name)
                record = ModelRecord.of(await add_model(session, name, kind, description, actor))
        except IntegrityError:
            raise name_taken("model", name) from None
        await self._on_change()
        return record

    async def get_model(self, name: str) -> ModelRecord:
        async with self._sessions() as session:
            return ModelRecord.of(await _model(session, name))

    async def list_models(self) -> list[ModelRecord]:
        async with self._sessions() as session:
            return [ModelRecord.of(row) for row in await ModelRepository(session).list()]

    async def list_versions(self, model: str | None = None) -> list[VersionRecord]:
        """Oldest first; all models' when `model` is None."""
        async with self._sessions() as session:
            if model is not None:
                await _model(session, model)
            rows = await ModelVersionRepository(session).list(model)
            return [VersionRecord.of(row) for row in rows]

    async def get_version(self, model: str, version: str) -> VersionRecord:
        async with self._sessions() as session:
            return VersionRecord.of(await _version(session, model, version))

    async def register_version(
        self,
        model: str,
        version: str,
        artifact: str,
        *,
        format: ModelFormat | None = None,
        checksum: str | None = None,
        params: Mapping[str, Any] | None = None,
        actor: str,
    ) -> VersionRecord:
        check_version(version)
        check_artifact_place(artifact, self._model_dirs)
        checked = check_params(params or {})
        async with self._sessions() as session:
            kind = ModelKind((await _model(session, model)).kind)
        ref = VersionRef(
            model,
            version,
            kind,
            format or infer_format(artifact),
            artifact,
            checksum,
            version_params(checked),
        )
        actual = await verified_checksum(ref)  # outside the transaction: it reads the file
        try:
            async with self._sessions.begin() as session:
                model_row = await _model(session, model)
                if await ModelVersionRepository(session).get(model, version) is not None:
                    raise _version_exists(ref)
                row = await add_version(session, model_row, ref, actual, actor)
                record = VersionRecord.of(row)
        except IntegrityError:
            raise _version_exists(ref) from None
        await self._on_change()
        return record

    async def retire_version(self, model: str, version: str, *, actor: str) -> VersionRecord:
        """Retire a version no deployment serves; it stays listed, and cannot be deployed."""
        async with self._sessions.begin() as session:
            row = await _version(session, model, version)
            if row.status == VersionStatus.RETIRED:
                raise Conflict(f"{model}@{version} is already retired", code="already_retired")
            users = await DeploymentRepository(session).serving(row.id)
            if users:
                raise Conflict(
                    f"{model}@{version} is still served by deployment(s) {', '.join(users)}; "
                    "promote or roll back to another version there first",
                    code="version_in_use",
                )
            before = version_snapshot(row)
            row.status = VersionStatus.RETIRED.value
            after = version_snapshot(row)
            key = f"{model}@{version}"
            AuditRepository(session).log(actor, "version.retire", "version", key, before, after)
            record = VersionRecord.of(row)
        await self._on_change()
        return record

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
        registration is audited, and nobody is told."""
        async with self._sessions.begin() as session:
            row = await ModelVersionRepository(session).get(model, version)
            if row is not None:
                row.source, row.error = source, error
                if row.status != VersionStatus.RETIRED:
                    row.status = status.value
                return
            models = ModelRepository(session)
            model_row = await models.get(model)
            if model_row is None:
                model_row = Model(name=model, kind=kind)
                models.add(model_row)
                await session.flush()
            session.add(
                ModelVersion(
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
            )
            after = {"model": model, "version": version, "artifact": source, "kind": kind}
            key = f"{model}@{version}"
            AuditRepository(session).log("system", "version.register", "version", key, None, after)


async def add_model(
    session: AsyncSession, name: str, kind: ModelKind, description: str | None, actor: str
) -> Model:
    row = Model(name=name, kind=kind.value, description=description)
    ModelRepository(session).add(row)
    await session.flush()
    after = {"name": name, "kind": kind.value, "description": description}
    AuditRepository(session).log(actor, "model.register", "model", name, None, after)
    return row


async def add_version(
    session: AsyncSession, model: Model, ref: VersionRef, checksum: str, actor: str
) -> ModelVersion:
    """A new version row, audited. `ref` is checked: its checksum is `checksum`."""
    row = ModelVersion(
        model_id=model.id,
        model=ref.model,
        version=ref.version,
        kind=ref.kind.value,
        format=ref.format.value,
        artifact=ref.artifact,
        checksum=checksum,
        params=dict(ref.params),
        source=ref.artifact,
        status=VersionStatus.REGISTERED.value,
    )
    ModelVersionRepository(session).add(row)
    await session.flush()
    after = version_snapshot(row)
    AuditRepository(session).log(actor, "version.register", "version", ref.key, None, after)
    return row


async def _model(session: AsyncSession, name: str) -> Model:
    row = await ModelRepository(session).get(name)
    return must_exist(row, "model", name, param="model", listing="GET /api/admin/models lists them")


async def _version(session: AsyncSession, model: str, version: str) -> ModelVersion:
    row = await ModelVersionRepository(session).get(model, version)
    if row is None:
        await _model(session, model)
        raise NotFound(
            f"model {model!r} has no version {version!r}; "
            f"GET /api/admin/models/{model}/versions lists them",
            param="version",
            code="version_not_found",
        )
    return row


def _version_exists(ref: VersionRef) -> Conflict:
    return Conflict(
        f"{ref.key} is already registered; versions do not change once registered, so "
        "register the new artifact under a new version name",
        param="version",
        code="version_exists",
    )
