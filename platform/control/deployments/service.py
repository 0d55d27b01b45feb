"""The rules for deployments: drafts.py checks a draft; this file decides which writes
happen, audits them and bumps revisions.

Every change goes through one path, `change_deployment`: read the row, check the
revision the caller read, apply the edit to a draft, check the draft, write, audit. A
write that changes nothing leaves no row, no audit entry and no new revision.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from vigil.platform.control.audit.records import AuditRecord
from vigil.platform.control.audit.repository import AuditRepository
from vigil.platform.control.db import Service, aware, utcnow
from vigil.platform.control.deployments.drafts import check_draft, record_of, snapshot, store
from vigil.platform.control.deployments.records import (
    DeploymentDraft,
    DeploymentRecord,
    RollbackPlan,
    StableHistoryRecord,
    VersionKey,
)
from vigil.platform.control.deployments.repository import ROLLBACK, DeploymentRepository
from vigil.platform.control.deployments.slos import check_slo, slo_of, slo_snapshot, store_slo
from vigil.platform.control.deployments.tables import SLO, Deployment, StableHistoryEntry
from vigil.platform.control.names import check_name, must_exist, name_taken
from vigil.platform.control.specs import SLOTargets, VersionRef
from vigil.platform.control.versions.records import VersionStatus, version_ref
from vigil.platform.control.versions.repository import ModelVersionRepository
from vigil.platform.control.versions.tables import ModelVersion
from vigil.platform.errors import Conflict

Edit = Callable[[DeploymentDraft], DeploymentDraft]


@dataclass(frozen=True, slots=True)
class Planner:
    """An edit that depends on more than the draft (the history): decided from the row,
    in the transaction that writes it."""

    plan: Callable[[AsyncSession, Deployment], Awaitable[Edit]]


async def load_records(session: AsyncSession, rows: Sequence[Deployment]) -> list[DeploymentRecord]:
    version_ids = {
        i
        for r in rows
        for i in (r.stable_version_id, r.canary_version_id, r.shadow_version_id)
        if i is not None
    }
    versions = await ModelVersionRepository(session).by_ids(version_ids)
    slos = await DeploymentRepository(session).slos({r.id for r in rows})
    return [record_of(row, versions, slo_of(slos.get(row.id))) for row in rows]


async def create_deployment(
    session: AsyncSession,
    name: str,
    draft: DeploymentDraft,
    slo: SLOTargets,
    actor: str,
    deployment_names: set[str],
) -> DeploymentRecord:
    check_name(name, "a deployment")
    repo = DeploymentRepository(session)
    if await repo.get(name) is not None:
        raise _exists(name)
    ids = await check_draft(session, name, draft, deployment_names)
    check_slo(slo)
    row = Deployment(name=name)
    store(row, draft, ids)
    repo.add(row)
    await session.flush()  # assigns the id and revision 1
    slo_row = SLO(deployment_id=row.id)
    store_slo(slo_row, slo)
    repo.add(slo_row)
    after = snapshot(name, draft, row.revision) | {"slo": slo_snapshot(slo)}
    AuditRepository(session).log(actor, "deployment.create", "deployment", name, None, after)
    (record,) = await load_records(session, [row])
    return record


async def change_deployment(
    session: AsyncSession,
    row: Deployment,
    edit: Edit,
    *,
    actor: str,
    action: str,
    deployment_names: set[str],
    reason: str | None = None,
) -> DeploymentRecord | None:
    """The new record, or None when the edit changes nothing. `reason`, when given, is
    kept with the audit entry (a change the system made says why)."""
    (current,) = await load_records(session, [row])
    draft = edit(current.draft)
    if draft == current.draft:
        return None
    ids = await check_draft(session, row.name, draft, deployment_names)
    before = snapshot(row.name, current.draft, row.revision)
    replaced_id, replaced_revision = row.stable_version_id, row.revision
    store(row, draft, ids)
    await session.flush()  # UPDATE ... WHERE revision = <read>; bumps it
    if row.stable_version_id != replaced_id:
        entry = StableHistoryEntry(
            deployment_id=row.id,
            version_id=replaced_id,
            revision=replaced_revision,
            action=action,
            actor=actor,
        )
        DeploymentRepository(session).add(entry)
    after = snapshot(row.name, draft, row.revision)
    if reason is not None:
        after["reason"] = reason
    AuditRepository(session).log(actor, action, "deployment", row.name, before, after)
    (record,) = await load_records(session, [row])
    return record


async def change_slo(session: AsyncSession, row: Deployment, slo: SLOTargets, actor: str) -> bool:
    """Set the deployment's SLO targets; False when they already were these."""
    check_slo(slo)
    repo = DeploymentRepository(session)
    slo_row = (await repo.slos({row.id})).get(row.id)
    before = slo_of(slo_row) if slo_row is not None else None
    if before == slo:
        return False
    if slo_row is None:
        slo_row = SLO(deployment_id=row.id)
        repo.add(slo_row)
    store_slo(slo_row, slo)
    AuditRepository(session).log(
        actor,
        "deployment.slo",
        "deployment",
        row.name,
        {"slo": slo_snapshot(before)} if before is not None else None,
        {"slo": slo_snapshot(slo)},
    )
    return True


HISTORY_LIMIT = 200  # audit entries read back for a deployment's previous stable version


class DeploymentService(Service):
    async def list(self) -> list[DeploymentRecord]:
        async with self._sessions() as session:
            return await load_records(session, await DeploymentRepository(session).list())

    async def get(self, name: str) -> DeploymentRecord:
        async with self._sessions() as session:
            (record,) = await load_records(session, [await _deployment(session, name)])
            return record

    async def create(
        self, name: str, draft: DeploymentDraft, *, slo: SLOTargets | None = None, actor: str
    ) -> DeploymentRecord:
        try:
            async with self._sessions.begin() as session:
                names = await DeploymentRepository(session).names()
                record = await create_deployment(
                    session, name, draft, slo or SLOTargets(), actor, names
                )
        except IntegrityError:
            raise _exists(name) from None
        await self._on_change()
        return record

    async def update(
        self, name: str, draft: DeploymentDraft, *, revision: int, actor: str
    ) -> DeploymentRecord:
        """Replace the settings with `draft`, if the deployment is still at `revision`."""
        return await self._change(name, revision, lambda _: draft, actor, "deployment.update")

    async def set_canary(
        self,
        name: str,
        version: VersionKey,
        weight: int,
        *,
        revision: int | None = None,
        actor: str,
    ) -> DeploymentRecord:
        """Send `weight` percent of the traffic to `version` (the canary)."""

        def edit(d: DeploymentDraft) -> DeploymentDraft:
            return replace(d, canary=version, canary_weight=weight)

        return await self._change(
            name, revision, edit, actor, "deployment.canary", takes_traffic=_weighted_canary
        )

    async def set_weight(
        self, name: str, weight: int, *, revision: int | None = None, actor: str
    ) -> DeploymentRecord:
        edit = _canary_edit(name, "shift traffic to", lambda d, _: replace(d, canary_weight=weight))
        return await self._change(
            name, revision, edit, actor, "deployment.canary_weight", takes_traffic=_weighted_canary
        )

    async def set_shadow(
        self,
        name: str,
        version: VersionKey,
        weight: int,
        *,
        revision: int | None = None,
        actor: str,
    ) -> DeploymentRecord:
        """Mirror `weight` percent of the requests to `version` (the shadow). No client
        sees its answers, so it needs no worker ready: it is mirrored to once it is."""

        def edit(d: DeploymentDraft) -> DeploymentDraft:
            return replace(d, shadow=version, shadow_weight=weight)

        return await self._change(name, revision, edit, actor, "deployment.shadow")

    async def clear_shadow(
        self, name: str, *, revision: int | None = None, actor: str, reason: str | None = None
    ) -> DeploymentRecord:
        def edit(d: DeploymentDraft) -> DeploymentDraft:
            return replace(d, shadow=None, shadow_weight=0)

        return await self._change(
            name, revision, edit, actor, "deployment.shadow_clear", reason=reason
        )

    async def promote(
        self, name: str, *, revision: int | None = None, actor: str
    ) -> DeploymentRecord:
        """The canary becomes the stable version and takes all the traffic."""
        edit = _canary_edit(
            name,
            "promote",
            lambda d, canary: replace(d, stable=canary, canary=None, canary_weight=0),
        )
        return await self._change(
            name, revision, edit, actor, "deployment.promote", takes_traffic=lambda d: d.stable
        )

    async def drop_canary(
        self, name: str, *, revision: int | None = None, actor: str, reason: str | None = None
    ) -> DeploymentRecord:
        """The canary is dropped; the stable version takes all the traffic again. The SLO
        loop's automatic roll back: it never touches the stable version."""
        edit = _canary_edit(
            name, "roll back", lambda d, _: replace(d, canary=None, canary_weight=0)
        )
        return await self._change(name, revision, edit, actor, ROLLBACK, reason=reason)

    async def rollback(
        self, name: str, *, revision: int | None = None, actor: str
    ) -> DeploymentRecord:
        """With a canary, drop it; without one, put back the stable version that the last
        promotion (or edit of stable) replaced, marking its history entry restored."""

        restored: VersionKey | None = None  # the version that takes the traffic back

        async def plan(session: AsyncSession, row: Deployment) -> Edit:
            nonlocal restored
            if row.canary_version_id is not None:
                return lambda d: replace(d, canary=None, canary_weight=0)
            entry, version = await _restorable(session, row)
            entry.restored_at = utcnow()
            restored = VersionKey(version.model, version.version)
            key = restored
            return lambda d: replace(d, stable=key)

        return await self._change(
            name, revision, Planner(plan), actor, ROLLBACK, takes_traffic=lambda _: restored
        )

    async def rollback_plan(self, name: str) -> RollbackPlan:
        """What `rollback` would do now (the console's review step); Conflict when there
        is nothing it could do."""
        async with self._sessions() as session:
            row = await _deployment(session, name)
            (record,) = await load_records(session, [row])
            if record.spec.canary is not None:
                return RollbackPlan(name, row.revision, record.spec.canary, None)
            entry, version = await _restorable(session, row)
            restores = _history_record(entry, version)
            return RollbackPlan(name, row.revision, record.spec.stable, restores)

    async def stable_history(
        self, name: str, limit: int = 50
    ) -> builtins.list[StableHistoryRecord]:
        """The stable versions replaced, newest first."""
        async with self._sessions() as session:
            row = await _deployment(session, name)
            entries = await DeploymentRepository(session).stable_history(row.id, limit)
            versions = await ModelVersionRepository(session).by_ids({e.version_id for e in entries})
            return [_history_record(e, versions[e.version_id]) for e in entries]

    async def previous_stable(self, name: str) -> VersionRef | None:
        """The stable version before the current one (from the audit log), if it can
        still be served (registered and not retired)."""
        async with self._sessions() as session:
            row = await _deployment(session, name)
            record = (await load_records(session, [row]))[0]
            current = str(record.draft.stable)
            rows = await AuditRepository(session).newest("deployment", name, HISTORY_LIMIT)
            for entry in map(AuditRecord.of, rows):
                before, after = entry.before, entry.after
                if before is None or after is None or after.get("stable") != current:
                    continue
                if before.get("stable") not in (None, current):
                    model, _, version = str(before["stable"]).partition("@")
                    old = await ModelVersionRepository(session).get(model, version)
                    if old is None or old.status == VersionStatus.RETIRED:
                        return None
                    return version_ref(old)
            return None

    async def get_slo(self, name: str) -> SLOTargets:
        async with self._sessions() as session:
            row = await _deployment(session, name)
            slos = await DeploymentRepository(session).slos({row.id})
            return slo_of(slos.get(row.id))

    async def set_slo(self, name: str, slo: SLOTargets, *, actor: str) -> SLOTargets:
        async with self._sessions.begin() as session:
            changed = await change_slo(session, await _deployment(session, name), slo, actor)
        if changed:
            await self._on_change()
        return slo

    async def _change(
        self,
        name: str,
        revision: int | None,
        edit: Edit | Planner,
        actor: str,
        action: str,
        takes_traffic: Callable[[DeploymentDraft], VersionKey | None] = lambda _: None,
        reason: str | None = None,
    ) -> DeploymentRecord:
        """Apply `edit` (or the edit a Planner decides from the row, in the same
        transaction); `takes_traffic` names the version the edit sends new traffic to,
        which must be ready on some worker (else Conflict, nothing written)."""
        try:
            async with self._sessions.begin() as session:
                row = await _deployment(session, name)
                if revision is not None and row.revision != revision:
                    raise _stale(name, revision, row.revision)
                if isinstance(edit, Planner):
                    edit = await edit.plan(session, row)
                names = await DeploymentRepository(session).names()
                record = await change_deployment(
                    session,
                    row,
                    edit,
                    actor=actor,
                    action=action,
                    deployment_names=names,
                    reason=reason,
                )
                if record is None:  # nothing to change
                    (unchanged,) = await load_records(session, [row])
                    return unchanged
                if (version := takes_traffic(record.draft)) is not None:
                    await _check_ready(session, version)
        except StaleDataError:  # another write landed between our read and our write
            raise Conflict(
                f"deployment {name!r} was changed by someone else while this change was "
                "being written; read it again and retry",
                param="revision",
                code="revision_conflict",
            ) from None
        await self._on_change()
        return record


async def _deployment(session: AsyncSession, name: str) -> Deployment:
    row = await DeploymentRepository(session).get(name)
    return must_exist(
        row, "deployment", name, param="deployment", listing="GET /api/admin/deployments lists them"
    )


def _stale(name: str, read: int, current: int) -> Conflict:
    return Conflict(
        f"deployment {name!r} is at revision {current}, not {read}: someone changed it "
        f"since you read it; read it again (GET /api/admin/deployments/{name}) and "
        "reapply your change",
        param="revision",
        code="revision_conflict",
    )


def _weighted_canary(draft: DeploymentDraft) -> VersionKey | None:
    return draft.canary if draft.canary_weight > 0 else None


async def _check_ready(session: AsyncSession, key: VersionKey) -> None:
    """A version takes traffic only once a worker has loaded it: a promoted version that
    failed to load would leave the deployment serving 503s after a restart."""
    row = await ModelVersionRepository(session).get(key.model, key.version)
    assert row is not None, f"{key} passed the draft's checks"
    if row.status != VersionStatus.READY:
        raise Conflict(
            f"{key} is {row.status}, not ready on any worker: it cannot take traffic yet. "
            "Give it a canary weight of 0 until GET /readyz lists it as ready"
            + (f" (it failed: {row.error})" if row.error else "")
            + ", then retry.",
            param="version",
            code="version_not_ready",
        )


def _canary_edit(
    name: str, verb: str, change: Callable[[DeploymentDraft, VersionKey], DeploymentDraft]
) -> Edit:
    """An edit of the canary: `change(draft, canary)`, refused when there is no canary."""

    def edit(draft: DeploymentDraft) -> DeploymentDraft:
        if draft.canary is None:
            raise _no_canary(name, verb)
        return change(draft, draft.canary)

    return edit


async def _restorable(
    session: AsyncSession, row: Deployment
) -> tuple[StableHistoryEntry, ModelVersion]:
    """The history entry a roll back without a canary restores, and its version; Conflict
    when there is none or its version can no longer be served."""
    entry = await DeploymentRepository(session).restorable(row)
    if entry is None:
        raise Conflict(
            f"deployment {row.name!r} has no canary and no earlier stable version to go "
            "back to (it was never promoted, or every promotion was rolled back already)",
            code="nothing_to_roll_back",
        )
    (version,) = (await ModelVersionRepository(session).by_ids({entry.version_id})).values()
    if version.status == VersionStatus.RETIRED:
        raise Conflict(
            f"the stable version before this one, {version.model}@{version.version}, is "
            "retired and can no longer be served; deploy another version as a canary and "
            f"promote it instead (POST /api/admin/deployments/{row.name}/canary)",
            param="version",
            code="version_not_servable",
        )
    return entry, version


def _history_record(entry: StableHistoryEntry, version: ModelVersion) -> StableHistoryRecord:
    return StableHistoryRecord(
        version=version_ref(version),
        revision=entry.revision,
        action=entry.action,
        actor=entry.actor,
        replaced_at=aware(entry.replaced_at),
        restored_at=aware(entry.restored_at) if entry.restored_at is not None else None,
    )


def _no_canary(name: str, verb: str) -> Conflict:
    return Conflict(
        f"deployment {name!r} has no canary to {verb}; set one first "
        f"(POST /api/admin/deployments/{name}/canary)",
        code="no_canary",
    )


def _exists(name: str) -> Conflict:
    return name_taken("deployment", name, hint="; change it with PATCH instead")
