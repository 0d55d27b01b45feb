"""Versions declared rather than registered over the API: the bundled models and the
versions a deployments file names. Each start registers the ones missing and checks
that the ones already registered are what is declared (versions never change)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.ext.asyncio import AsyncSession

from vigil.engine.bundled import bundled_source
from vigil.platform.control.audit.repository import AuditRepository
from vigil.platform.control.specs import VersionRef
from vigil.platform.control.versions.records import version_snapshot
from vigil.platform.control.versions.repository import ModelRepository, ModelVersionRepository
from vigil.platform.control.versions.service import add_model, add_version
from vigil.platform.errors import Conflict


async def unregistered(session: AsyncSession, refs: list[VersionRef]) -> list[VersionRef]:
    """The versions among `refs` not registered yet, once those that are have been
    found to match their declaration."""
    missing = []
    repo = ModelVersionRepository(session)
    for ref in refs:
        row = await repo.get(ref.model, ref.version)
        if row is None:
            missing.append(ref)
            continue
        same_artifact = row.artifact in (ref.artifact, _bundled_path(ref))
        same_checksum = ref.checksum is None or ref.checksum.lower() == row.checksum
        declared = (ref.kind, ref.format, dict(ref.params))
        if (row.kind, row.format, row.params) != declared or not (same_artifact and same_checksum):
            raise Conflict(
                f"{ref.key} is registered as {version_snapshot(row)}, which differs "
                f"from its declaration ({ref.artifact}, {ref.kind}, {ref.format}, "
                f"params {dict(ref.params)}); versions do not change once "
                "registered, so declare a new version name",
                param="version",
                code="version_exists",
            )
    return missing


async def ensure_version(
    session: AsyncSession, ref: VersionRef, checksums: Mapping[str, str], actor: str
) -> bool:
    """Register `ref` (and its model) unless it is; True when anything was written.
    `checksums` holds the verified checksum of every version not registered yet."""
    row = await ModelVersionRepository(session).get(ref.model, ref.version)
    if row is not None:
        if row.artifact != ref.artifact and row.artifact == _bundled_path(ref):
            # Recorded before revision 0003 with the file's path on this host; name the
            # artifact the portable way.
            before = version_snapshot(row)
            row.artifact = ref.artifact
            AuditRepository(session).log(
                actor, "version.update", "version", ref.key, before, version_snapshot(row)
            )
            return True
        return False
    model = await ModelRepository(session).get(ref.model)
    if model is None:
        model = await add_model(session, ref.model, ref.kind, None, actor)
    await add_version(session, model, ref, checksums[ref.key], actor)
    return True


def _bundled_path(ref: VersionRef) -> str | None:
    try:
        return str(bundled_source(ref.model).path)
    except (KeyError, FileNotFoundError):
        return None
