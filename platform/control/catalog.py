"""Models and their versions: registering, listing, retiring (the rules; SQL in
model_versions.py).

A version is registered with its artifact and a SHA-256 checksum of it: computed at
registration when not given, and verified when given, so that a typo'd path or a file
that changed since someone measured it is refused here rather than at load time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.platform.control.audit import AuditRepository, OnChange
from vigil.platform.control.model_versions import (
    ModelRepository,
    ModelVersionRepository,
    VersionStatus,
)
from vigil.platform.control.names import check_name, check_version
from vigil.platform.control.specs import VersionRef
from vigil.platform.control.tables import Model, ModelVersion, aware
from vigil.platform.control.version_checks import check_params, infer_format, verified_checksum
from vigil.platform.errors import Conflict, NotFound


@dataclass(frozen=True, slots=True)
class ModelRecord:
    name: str
    kind: ModelKind
    description: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class VersionRecord:
    ref: VersionRef  # what a deployment serves: model, version, artifact, checksum, params
    status: VersionStatus
    error: str | None  # why it failed to load
    source: str  # where a worker last loaded it from
    created_at: datetime
    updated_at: datetime


def version_ref(row: ModelVersion) -> VersionRef:
    return VersionRef(
        model=row.model,
        version=row.version,
        kind=ModelKind(row.kind),
        format=ModelFormat(row.format),
        artifact=row.artifact,
        checksum=row.checksum,
        params=tuple(sorted(row.params.items())),
    )


def version_record(row: ModelVersion) -> VersionRecord:
    return VersionRecord(
        ref=version_ref(row),
        status=VersionStatus(row.status),
        error=row.error,
        source=row.source,
        created_at=aware(row.created_at),
        updated_at=aware(row.updated_at),
    )


def version_snapshot(row: ModelVersion) -> dict[str, Any]:
    fields = ("model", "version", "kind", "format", "artifact", "checksum", "params", "status")
    return {name: getattr(row, name) for name in fields}


def model_record(row: Model) -> ModelRecord:
    return ModelRecord(row.name, ModelKind(row.kind), row.description, aware(row.created_at))


async def add_model(
    session: AsyncSession, name: str, kind: ModelKind, description: str | None, actor: str
) -> Model:
    row = Model(name=name, kind=kind.value, description=description)
    ModelRepository(session).add(row)
    await session.flush()
    after = {"name": name, "kind": kind.value, "description": description}
    AuditRepository(session).add(actor, "model.register", "model", name, None, after)
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
    AuditRepository(session).add(actor, "version.register", "version", ref.key, None, after)
    return row


class CatalogService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], on_change: OnChange) -> None:
        self._sessions = sessions
        self._on_change = on_change

    async def register_model(
        self, name: str, kind: ModelKind, description: str | None = None, *, actor: str
    ) -> ModelRecord:
        check_name(name, "a model")
        try:
            async with self._sessions.begin() as session:
                if await ModelRepository(session).get(name) is not None:
                    raise _model_exists(name)
                record = model_record(await add_model(session, name, kind, description, actor))
        except IntegrityError:
            raise _model_exists(name) from None
        await self._on_change()
        return record

    async def get_model(self, name: str) -> ModelRecord:
        async with self._sessions() as session:
            return model_record(await _model(session, name))

    async def list_models(self) -> list[ModelRecord]:
        async with self._sessions() as session:
            return [model_record(row) for row in await ModelRepository(session).list()]

    async def list_versions(self, model: str | None = None) -> list[VersionRecord]:
        """Oldest first; all models' when `model` is None."""
        async with self._sessions() as session:
            if model is not None:
                await _model(session, model)
            rows = await ModelVersionRepository(session).list(model)
            return [version_record(row) for row in rows]

    async def get_version(self, model: str, version: str) -> VersionRecord:
        async with self._sessions() as session:
            return version_record(await _version(session, model, version))

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
            tuple(sorted(checked.items())),
        )
        actual = await verified_checksum(ref)  # outside the transaction: it reads the file
        try:
            async with self._sessions.begin() as session:
                model_row = await _model(session, model)
                if await ModelVersionRepository(session).get(model, version) is not None:
                    raise _version_exists(ref)
                record = version_record(await add_version(session, model_row, ref, actual, actor))
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
            users = await ModelVersionRepository(session).users(row.id)
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
            AuditRepository(session).add(actor, "version.retire", "version", key, before, after)
            record = version_record(row)
        await self._on_change()
        return record


async def _model(session: AsyncSession, name: str) -> Model:
    row = await ModelRepository(session).get(name)
    if row is None:
        raise NotFound(
            f"no model is named {name!r}; GET /api/admin/models lists them",
            param="model",
            code="model_not_found",
        )
    return row


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


def _model_exists(name: str) -> Conflict:
    return Conflict(f"a model named {name!r} already exists", param="name", code="name_taken")


def _version_exists(ref: VersionRef) -> Conflict:
    return Conflict(
        f"{ref.key} is already registered; versions do not change once registered, so "
        "register the new artifact under a new version name",
        param="version",
        code="version_exists",
    )
