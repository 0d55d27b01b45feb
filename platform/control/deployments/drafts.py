"""How a deployment draft is stored in a `deployments` row and read back as a record,
how the audit log pictures it, and the rules a draft must pass before it is stored."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, NamedTuple

from sqlalchemy.ext.asyncio import AsyncSession

from vigil.engine.bundled import ModelKind
from vigil.engine.request import Priority
from vigil.platform.control.db import aware
from vigil.platform.control.deployments.records import (
    DeploymentDraft,
    DeploymentRecord,
    VersionKey,
)
from vigil.platform.control.deployments.repository import DeploymentRepository
from vigil.platform.control.deployments.tables import Deployment
from vigil.platform.control.specs import (
    ClassLimits,
    DeploymentSpec,
    FallbackSpec,
    FallbackTrigger,
    LongPromptPool,
    SLOTargets,
)
from vigil.platform.control.versions.records import VersionStatus, version_ref
from vigil.platform.control.versions.repository import ModelVersionRepository
from vigil.platform.control.versions.tables import ModelVersion
from vigil.platform.errors import InvalidRequest


def limits_json(limits: Mapping[Priority, ClassLimits]) -> dict[str, Any]:
    """{"interactive": {"max_queue", "max_queue_wait_s"}, "batch": {...}}"""
    return {p.label: asdict(limits[p]) for p in Priority}


def limits_of(stored: Mapping[str, Any]) -> dict[Priority, ClassLimits]:
    return {
        p: ClassLimits(
            int(stored[p.label]["max_queue"]), float(stored[p.label]["max_queue_wait_s"])
        )
        for p in Priority
    }


def store(row: Deployment, draft: DeploymentDraft, ids: VersionIds) -> None:
    row.stable_version_id, row.canary_version_id, row.shadow_version_id = ids
    row.canary_weight, row.shadow_weight = draft.canary_weight, draft.shadow_weight
    row.max_prompt_tokens, row.max_tokens = draft.max_prompt_tokens, draft.max_tokens
    row.limits = limits_json(draft.limits)
    fb = draft.fallback
    row.fallback_deployment = fb.deployment if fb else None
    row.fallback_trigger = fb.trigger.value if fb else None
    row.fallback_threshold_s = fb.threshold_s if fb else None
    pool = draft.long_prompt_pool
    row.long_prompt_min_tokens = pool.min_prompt_tokens if pool else None
    row.long_prompt_max_queue = pool.max_queue if pool else None
    row.long_prompt_max_num_seqs = pool.max_num_seqs if pool else None


def record_of(
    row: Deployment, versions: Mapping[int, ModelVersion], slo: SLOTargets
) -> DeploymentRecord:
    fallback = None
    if row.fallback_deployment is not None:
        assert row.fallback_trigger is not None and row.fallback_threshold_s is not None
        fallback = FallbackSpec(
            row.fallback_deployment,
            FallbackTrigger(row.fallback_trigger),
            row.fallback_threshold_s,
        )
    pool = None
    if row.long_prompt_min_tokens is not None:
        assert row.long_prompt_max_queue is not None and row.long_prompt_max_num_seqs is not None
        pool = LongPromptPool(
            row.long_prompt_min_tokens, row.long_prompt_max_queue, row.long_prompt_max_num_seqs
        )
    canary_id, shadow_id = row.canary_version_id, row.shadow_version_id
    spec = DeploymentSpec(
        name=row.name,
        stable=version_ref(versions[row.stable_version_id]),
        canary=version_ref(versions[canary_id]) if canary_id is not None else None,
        canary_weight=row.canary_weight,
        shadow=version_ref(versions[shadow_id]) if shadow_id is not None else None,
        shadow_weight=row.shadow_weight,
        max_prompt_tokens=row.max_prompt_tokens,
        max_tokens=row.max_tokens,
        limits=limits_of(row.limits),
        slo=slo,
        fallback=fallback,
        long_prompt_pool=pool,
    )
    return DeploymentRecord(spec, row.revision, aware(row.created_at), aware(row.updated_at))


def snapshot(name: str, draft: DeploymentDraft, revision: int | None) -> dict[str, Any]:
    """The audit log's picture of a deployment."""
    fb, pool = draft.fallback, draft.long_prompt_pool
    return {
        "name": name,
        "revision": revision,
        "stable": str(draft.stable),
        "canary": str(draft.canary) if draft.canary is not None else None,
        "canary_weight": draft.canary_weight,
        "shadow": str(draft.shadow) if draft.shadow is not None else None,
        "shadow_weight": draft.shadow_weight,
        "max_prompt_tokens": draft.max_prompt_tokens,
        "max_tokens": draft.max_tokens,
        "limits": limits_json(draft.limits),
        "fallback": asdict(fb) if fb is not None else None,
        "long_prompt_pool": asdict(pool) if pool is not None else None,
    }


class VersionIds(NamedTuple):
    stable: int
    canary: int | None
    shadow: int | None


async def check_draft(
    session: AsyncSession, name: str, draft: DeploymentDraft, deployment_names: set[str]
) -> VersionIds:
    """The ids of the stable, canary and shadow versions, once the draft passes every
    rule; else an InvalidRequest that names the field to fix. `deployment_names`: those a
    fallback may name."""
    stable = await _servable(session, draft.stable, "stable")
    canary = shadow = None
    if draft.canary is not None:
        canary = await _servable(session, draft.canary, "canary", stable.kind)
        if canary.id == stable.id:
            raise _invalid(f"{draft.canary} is already the stable version", "canary.version")
    if draft.shadow is not None:
        shadow = await _servable(session, draft.shadow, "shadow", stable.kind)
        if stable.kind == ModelKind.EMBED:
            raise _invalid("shadows mirror generation requests only", "shadow.version")
        if shadow.id in (stable.id, canary.id if canary else None):
            role = "stable" if shadow.id == stable.id else "canary"
            raise _invalid(f"{draft.shadow} is already the {role} version", "shadow.version")
    for role, version, weight in (
        ("canary", draft.canary, draft.canary_weight),
        ("shadow", draft.shadow, draft.shadow_weight),
    ):
        if not 0 <= weight <= 100:
            raise _invalid(
                f"{role} weight must be a percentage from 0 to 100, got {weight}", f"{role}.weight"
            )
        if version is None and weight != 0:
            raise _invalid(f"a {role} weight needs a {role} version", f"{role}.weight")
    for field_name in ("max_prompt_tokens", "max_tokens"):
        cap = getattr(draft, field_name)
        if cap is not None and cap < 1:
            raise _invalid(f"{field_name} must be at least 1 (or null for no cap)", field_name)
    _check_limits(draft.limits)
    if stable.kind == ModelKind.EMBED:
        _check_embedding(draft)
    if draft.fallback is not None:
        _check_fallback(name, draft.fallback, deployment_names)
        await _check_fallback_kind(session, draft.fallback)
    if (pool := draft.long_prompt_pool) is not None and min(
        pool.min_prompt_tokens, pool.max_queue, pool.max_num_seqs
    ) < 1:
        raise _invalid(
            "long_prompt_pool needs min_prompt_tokens, max_queue and max_num_seqs of at least 1",
            "long_prompt_pool",
        )
    return VersionIds(stable.id, canary.id if canary else None, shadow.id if shadow else None)


async def _servable(
    session: AsyncSession, key: VersionKey, role: str, stable_kind: str | None = None
) -> ModelVersion:
    """The version row, registered and not retired; a canary or shadow of the stable's
    kind (a generation model cannot stand in for an embedding model)."""
    repo = ModelVersionRepository(session)
    row = await repo.get(key.model, key.version)
    if row is None:
        known = [r.version for r in await repo.list(key.model)]
        listed = ", ".join(known) if known else "none (is the model registered?)"
        raise _invalid(
            f"the {role} version {key} is not registered; versions of {key.model!r}: {listed}",
            _version_param(role),
            code="version_not_found",
        )
    if stable_kind is not None and row.kind != stable_kind:
        raise _invalid(
            f"the {role} {key} is a {row.kind} model and the stable version a {stable_kind} "
            f"model; a {role} must be of the stable version's kind",
            _version_param(role),
        )
    if row.status == VersionStatus.RETIRED:
        raise _invalid(
            f"{key} is retired; register a new version instead",
            _version_param(role),
        )
    return row


def _version_param(role: str) -> str:
    return "version" if role == "stable" else f"{role}.version"


def _check_limits(limits: Mapping[Priority, ClassLimits]) -> None:
    for priority in Priority:
        name = priority.label
        lim = limits.get(priority)
        if lim is None:
            raise _invalid(f"limits for the {name} class are missing", f"limits.{name}")
        if lim.max_queue < 0 or lim.max_queue_wait_s <= 0:
            raise _invalid(
                f"limits.{name} needs max_queue >= 0 and max_queue_wait_s > 0, got "
                f"{lim.max_queue} and {lim.max_queue_wait_s}",
                f"limits.{name}",
            )


def _check_embedding(draft: DeploymentDraft) -> None:
    """What only generation deployments have: output caps, fallbacks, long-prompt pools."""
    for field_name, value in (
        ("max_tokens", draft.max_tokens),
        ("fallback", draft.fallback),
        ("long_prompt_pool", draft.long_prompt_pool),
    ):
        if value is not None:
            raise _invalid(
                f"{field_name} applies to generation deployments only; this one serves an "
                "embedding model",
                field_name,
            )


async def _check_fallback_kind(session: AsyncSession, fb: FallbackSpec) -> None:
    target = await DeploymentRepository(session).get(fb.deployment)
    if target is None:
        return  # declared in the same file, checked when it is stored
    version = await session.get(ModelVersion, target.stable_version_id)
    if version is not None and version.kind != ModelKind.GENERATE:
        raise _invalid(
            f"the fallback deployment {fb.deployment!r} serves an embedding model; a fallback "
            "must serve generation",
            "fallback.deployment",
        )


def _check_fallback(name: str, fb: FallbackSpec, deployment_names: set[str]) -> None:
    if fb.deployment == name:
        raise _invalid(f"deployment {name!r} cannot fall back to itself", "fallback.deployment")
    if fb.deployment not in deployment_names:
        listed = ", ".join(sorted(deployment_names - {name})) or "none yet"
        raise _invalid(
            f"the fallback deployment {fb.deployment!r} does not exist (deployments: {listed})",
            "fallback.deployment",
        )
    if fb.threshold_s <= 0:
        raise _invalid(
            f"fallback.threshold_s must be above 0 seconds, got {fb.threshold_s}",
            "fallback.threshold_s",
        )


def _invalid(message: str, param: str, code: str = "invalid_value") -> InvalidRequest:
    return InvalidRequest(message, param=param, code=code)
