"""The control plane in one object: the domain services the admin API and the CLI use,
the serving view the gateway routes from, and the two start-up writes (the bundled
models, the deployments file), which span the versions and deployments domains.

Listeners run after every committed write made through it (not after worker status
reports or replica heartbeats, which are not admin writes); a failing listener is
logged and does not undo or fail the write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from argon2 import PasswordHasher
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.engine.bundled import ModelKind
from vigil.platform.control.access.keys import ApiKeyService
from vigil.platform.control.access.sessions import SessionService
from vigil.platform.control.access.users import UserService
from vigil.platform.control.alerts.service import AlertService
from vigil.platform.control.audit.service import AuditService
from vigil.platform.control.db import OnChange
from vigil.platform.control.deployments.config_file import load_declarations
from vigil.platform.control.deployments.records import DeploymentDraft, VersionKey, draft_of
from vigil.platform.control.deployments.repository import DeploymentRepository
from vigil.platform.control.deployments.service import (
    DeploymentService,
    change_deployment,
    change_slo,
    create_deployment,
)
from vigil.platform.control.replicas.service import ReplicaService
from vigil.platform.control.specs import (
    DEFAULT_MAX_QUEUE_WAIT_S,
    DeploymentSpec,
    SLOTargets,
    VersionRef,
    bundled_version,
    default_limits,
)
from vigil.platform.control.versions.checks import check_params, verified_checksum
from vigil.platform.control.versions.declared import ensure_version, unregistered
from vigil.platform.control.versions.local import is_local, local_version, model_args
from vigil.platform.control.versions.service import VersionService
from vigil.platform.control.webhooks.addresses import WebhookAddressPolicy
from vigil.platform.control.webhooks.outbox import OutboxService
from vigil.platform.control.webhooks.service import WebhookService
from vigil.platform.errors import Conflict

log = logging.getLogger(__name__)


class ControlPlane:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        password_hasher: PasswordHasher | None = None,
        model_dirs: Sequence[Path] = (),
        webhook_policy: WebhookAddressPolicy | None = None,
        max_queue_wait_s: float = DEFAULT_MAX_QUEUE_WAIT_S,
    ) -> None:
        """`model_dirs`: where the artifacts of registered versions may come from (none:
        only bundled models). `webhook_policy`: where webhooks may point (none: public
        addresses only). `max_queue_wait_s`: the interactive wait of deployments made
        without their own limits (`default_limits`)."""
        self.default_limits = default_limits(max_queue_wait_s)
        self._sessions = sessions
        self._listeners: list[OnChange] = []
        self.versions = VersionService(sessions, self._changed, model_dirs)  # models, versions
        self.deployments = DeploymentService(sessions, self._changed)  # and their SLOs
        self.webhooks = WebhookService(sessions, self._changed, webhook_policy)
        self.users = UserService(sessions, self._changed, hasher=password_hasher)
        self.keys = ApiKeyService(sessions, self._changed)
        self.sessions = SessionService(sessions)  # console sign-ins: not admin writes
        self.audit = AuditService(sessions)
        self.replicas = ReplicaService(sessions)
        # Set when a webhook message is owed, so the delivery loop need not wait its poll.
        self.outbox_written = asyncio.Event()
        self.alerts = AlertService(sessions, self._wake_delivery)  # alerts and decisions
        self.outbox = OutboxService(sessions, self._wake_delivery)  # messages, deliveries

    async def _wake_delivery(self) -> None:
        self.outbox_written.set()

    def add_listener(self, callback: OnChange) -> None:
        self._listeners.append(callback)

    async def serving_view(self) -> list[DeploymentSpec]:
        """Every deployment, by name, as the gateway routes it."""
        return [record.spec for record in await self.deployments.list()]

    async def declare(self, models: list[str], config_path: Path | None) -> None:
        """The start-up writes: the bundled models seeded, the models given by path
        deployed under their names, then the deployments file applied (its declarations
        hold at start; after that, the database rules). `models`: `vigil serve`'s MODEL
        arguments (versions/local.py)."""
        args = model_args(models)
        await self.seed_bundled([a.name for a in args if a.path is None])
        local = [await asyncio.to_thread(local_version, a) for a in args if a.path is not None]
        if local:
            await self.apply_config(
                [DeploymentSpec(ref.model, ref, limits=self.default_limits) for ref in local]
            )
        if config_path is not None:
            bundled = {a.name for a in args if a.path is None}
            specs, versions = await asyncio.to_thread(
                load_declarations, config_path, bundled, self.default_limits, local
            )
            await self.apply_config(specs, versions)

    async def seed_bundled(self, models: list[str]) -> None:
        """Register each bundled model and its version (once), and deploy them (_seed)."""
        refs = [bundled_version(name) for name in models]
        checksums = await self._checksums_of_unregistered(refs)
        try:
            changed = await self._seed(refs, checksums)
        except IntegrityError:  # another process seeded at the same time
            changed = await self._seed(refs, checksums)
        if changed:
            await self._changed()

    async def apply_config(
        self, deployments: list[DeploymentSpec], versions: Sequence[VersionRef] = ()
    ) -> None:
        """Make the versions and deployments of a deployments file so (actor 'config'),
        in one transaction; `versions`: more it declares, which no deployment serves
        yet. The file wins for the deployments it names: an admin change to one of them
        lasts until the next start with the file. Others are left alone."""
        refs = _declared_versions(deployments, versions)
        checksums = await self._checksums_of_unregistered(refs)
        async with self._sessions.begin() as session:
            changed = False
            for ref in refs:
                changed |= await ensure_version(session, ref, checksums, "config")
            repo = DeploymentRepository(session)
            names = await repo.names() | {spec.name for spec in deployments}
            for spec in deployments:
                changed |= await _apply_deployment(session, spec, names)
        if changed:
            await self._changed()

    async def _checksums_of_unregistered(self, refs: list[VersionRef]) -> dict[str, str]:
        """Outside any transaction: computing a checksum reads the whole artifact."""
        async with self._sessions() as session:
            missing = await unregistered(session, refs)
        # A version served from a path was named for the checksum just computed
        # (versions/local.py): its bytes need not be read twice.
        return {
            ref.key: ref.checksum
            if is_local(ref) and ref.checksum
            else await verified_checksum(ref)
            for ref in missing
        }

    async def _seed(self, refs: list[VersionRef], checksums: dict[str, str]) -> bool:
        """The versions, and the deployments: each bundled model under its own name when
        there is no deployment at all; and an embedding model no deployment serves gets
        one then too (one served before embedding models were deployed keeps serving)."""
        async with self._sessions.begin() as session:
            changed = False
            for ref in refs:
                changed |= await ensure_version(session, ref, checksums, "system")
            repo = DeploymentRepository(session)
            names = await repo.names()
            served = await repo.models_served() if names else set()
            for ref in refs:
                fresh = not names or (ref.kind is ModelKind.EMBED and ref.model not in served)
                if fresh and ref.model not in names:
                    draft = DeploymentDraft(
                        VersionKey(ref.model, ref.version), limits=self.default_limits
                    )
                    await create_deployment(
                        session, ref.model, draft, SLOTargets(), "system", set(names)
                    )
                    changed = True
            return changed

    async def _changed(self) -> None:
        for callback in list(self._listeners):
            try:
                await callback()
            except Exception:
                log.exception("a control-plane listener failed")


def _declared_versions(
    deployments: list[DeploymentSpec], versions: Sequence[VersionRef]
) -> list[VersionRef]:
    refs: dict[str, VersionRef] = {}
    for ref in [*(ref for spec in deployments for ref in spec.versions), *versions]:
        check_params(dict(ref.params))
        if refs.setdefault(ref.key, ref) != ref:
            raise Conflict(
                f"{ref.key} is declared twice, differently", param="version", code="invalid"
            )
    return list(refs.values())


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
