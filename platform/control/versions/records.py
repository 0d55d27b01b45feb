"""What the versions domain hands out: models, versions with their load status, and the
`VersionRef` a deployment serves (specs.py) read from a row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.platform.control.db import aware
from vigil.platform.control.specs import VersionRef, version_params
from vigil.platform.control.versions.tables import Model, ModelVersion


class VersionStatus(StrEnum):
    REGISTERED = "registered"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    RETIRED = "retired"  # kept for the record; no deployment may use it


@dataclass(frozen=True, slots=True)
class ModelRecord:
    name: str
    kind: ModelKind
    description: str | None
    created_at: datetime

    @classmethod
    def of(cls, row: Model) -> ModelRecord:
        return cls(row.name, ModelKind(row.kind), row.description, aware(row.created_at))


@dataclass(frozen=True, slots=True)
class VersionRecord:
    ref: VersionRef  # what a deployment serves: model, version, artifact, checksum, params
    status: VersionStatus
    error: str | None  # why it failed to load
    source: str  # where a worker last loaded it from
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: ModelVersion) -> VersionRecord:
        return cls(
            ref=version_ref(row),
            status=VersionStatus(row.status),
            error=row.error,
            source=row.source,
            created_at=aware(row.created_at),
            updated_at=aware(row.updated_at),
        )


def version_ref(row: ModelVersion) -> VersionRef:
    return VersionRef(
        model=row.model,
        version=row.version,
        kind=ModelKind(row.kind),
        format=ModelFormat(row.format),
        artifact=row.artifact,
        checksum=row.checksum,
        params=version_params(row.params),
    )


def version_snapshot(row: ModelVersion) -> dict[str, Any]:
    """The audit log's picture of a version."""
    fields = ("model", "version", "kind", "format", "artifact", "checksum", "params", "status")
    return {name: getattr(row, name) for name in fields}
