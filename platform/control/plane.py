"""The control plane in one object: the services the admin API and the CLI use, the
serving view the gateway routes from, and the two start-up writes (the bundled models,
the deployments file).

Listeners run after every committed write made through it (not after worker status
reports or replica heartbeats, which are not admin writes); a failing listener is
logged and does not undo or fail the write.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from argon2 import PasswordHasher
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.engine.bundled import ModelKind, bundled_source
from vigil.platform.control.api_keys import ApiKeyService
from vigil.platform.control.audit import AuditRepository, AuditService
from vigil.platform.control.catalog import (
    CatalogService,
    add_model,
    add_version,
    version_snapshot,
)
from vigil.platform.control.deployments import (
    DeploymentRepository,
    DeploymentService,
    change_deployment,
    change_slo,
    create_deployment,
)
from vigil.platform.control.drafts import DeploymentDraft, VersionKey, draft_of
from vigil.platform.control.key_admin import KeyAdminService
from vigil.platform.control.model_versions import (
    ModelRepository,
    ModelVersionRepository,
    ModelVersionService,
)
from vigil.platform.control.replicas import ReplicaService
from vigil.platform.control.specs import DeploymentSpec, SLOTargets, VersionRef, bundled_version
from vigil.platform.control.users import UserService
from vigil.platform.control.version_checks import check_params, verified_checksum
from vigil.platform.control.webhooks import WebhookService
from vigil.platform.errors import Conflict

log = logging.getLogger(__name__)

Listener = Callable[[], Awaitable[None]]


class ControlPlane:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        password_hasher: PasswordHasher | None = None,
    ) -> None:
        self._sessions = sessions
        self._listeners: list[Listener] = []
        self.catalog = CatalogService(sessions, self._changed)  # models and versions
        self.deployments = DeploymentService(sessions, self._changed)  # and their SLOs
        self.webhooks = WebhookService(sessions, self._changed)
        self.users = UserService(sessions, self._changed, hasher=password_hasher)
        self.keys = KeyAdminService(ApiKeyService(sessions), self._changed)
        self.audit = AuditService(sessions)
        self.replicas = ReplicaService(sessions)
        self.versions = ModelVersionService(sessions)  # the worker's load reports

    def add_listener(self, callback: Listener) -> None:
        self._listeners.append(callback)

    async def serving_view(self) -> list[DeploymentSpec]:
        """Every deployment, by name, as the gateway routes it."""
        return [record.spec for record in await self.deployments.list()]

    async def seed_bundled(self, models: list[str]) -> None:
        """Register each bundled model and its version (once), and when there is no
        deployment at all, deploy each bundled generation model under its own name."""
        refs = [bundled_version(name) for name in models]
        missing = await self._unregistered(refs)
        checksums = {ref.key: await verified_checksum(ref) for ref in missing}
        try:
            changed = await self._seed(refs, checksums)
        except IntegrityError:  # another process seeded at the same time
            changed = await self._seed(refs, checksums)
        if changed:
            await self._changed()

    async def apply_config(self, deployments: list[DeploymentSpec]) -> None:
        """Make the versions and deployments of a deployments file so (actor 'config'),
        in one transaction. The file wins for the deployments it names: an admin change
        to one of them lasts until the next start with the file. Others are left alone."""
        refs = _declared_versions(deployments)
        missing = await self._unregistered(refs)
        checksums = {ref.key: await verified_checksum(ref) for ref in missing}
        async with self._sessions.begin() as session:
            changed = False
            for ref in refs:
                changed |= await _ensure_version(session, ref, checksums, "config")
            repo = DeploymentRepository(session)
            names = await repo.names() | {spec.name for spec in deployments}
            for spec in deployments:
                changed |= await _apply_deployment(session, spec, names)
        if changed:
            await self._changed()

    async def _unregistered(self, refs: list[VersionRef]) -> list[VersionRef]:
        """The versions not registered yet, after checking those that are match."""
        missing = []
        async with self._sessions() as session:
            repo = ModelVersionRepository(session)
            for ref in refs:
                row = await repo.get(ref.model, ref.version)
                if row is None:
                    missing.append(ref)
                    continue
                same_artifact = row.artifact in (ref.artifact, _bundled_path(ref))
                same_checksum = ref.checksum is None or ref.checksum.lower() == row.checksum
                declared = (ref.kind, ref.format, dict(ref.params))
                if (row.kind, row.format, row.params) != declared or not (
                    same_artifact and same_checksum
                ):
                    raise Conflict(
                        f"{ref.key} is registered as {version_snapshot(row)}, which differs "
                        f"from its declaration ({ref.artifact}, {ref.kind}, {ref.format}, "
                        f"params {dict(ref.params)}); versions do not change once "
                        "registered, so declare a new version name",
                        param="version",
                        code="version_exists",
                    )
        return missing

    async def _seed(self, refs: list[VersionRef], checksums: dict[str, str]) -> bool:
        async with self._sessions.begin() as session:
            changed = False
            for ref in refs:
                changed |= await _ensure_version(session, ref, checksums, "system")
            repo = DeploymentRepository(session)
            if not await repo.names():
                for ref in refs:
                    if ref.kind is ModelKind.GENERATE:
                        draft = DeploymentDraft(VersionKey(ref.model, ref.version))
                        await create_deployment(
                            session, ref.model, draft, SLOTargets(), "system", set()
                        )
                        changed = True
            return changed

    async def _changed(self) -> None:
        for callback in list(self._listeners):
            try:
                await callback()
            except Exception:
                log.exception("a control-plane listener failed")


def _declared_versions(deployments: list[DeploymentSpec]) -> list[VersionRef]:
    refs: dict[str, VersionRef] = {}
    for spec in deployments:
        for ref in spec.versions:
            check_params(dict(ref.params))
            if refs.setdefault(ref.key, ref) != ref:
                raise Conflict(
                    f"{ref.key} is declared twice, differently", param="version", code="invalid"
                )
    return list(refs.values())


async def _ensure_version(
    session: AsyncSession, ref: VersionRef, checksums: dict[str, str], actor: str
) -> bool:
    """Register `ref` (and its model) unless it is; True when it was not."""
    versions = ModelVersionRepository(session)
    row = await versions.get(ref.model, ref.version)
    if row is not None:
        if row.artifact != ref.artifact and row.artifact == _bundled_path(ref):
            # Recorded before revision 0003 with the file's path on this host; name the
            # artifact the portable way.
            before = version_snapshot(row)
            row.artifact = ref.artifact
            AuditRepository(session).add(
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


async def _apply_deployment(session: AsyncSession, spec: DeploymentSpec, names: set[str]) -> bool:
    row = await DeploymentRepository(session).get(spec.name)
    draft = draft_of(spec)
    if row is None:
        await create_deployment(session, spec.name, draft, spec.slo, "config", names)
        return True
    record = await change_deployment(
        session,
        row,
        lambda _: draft,
        actor="config",
        action="deployment.update",
        deployment_names=names,
    )
    slo_changed = await change_slo(session, row, spec.slo, "config")
    return record is not None or slo_changed
