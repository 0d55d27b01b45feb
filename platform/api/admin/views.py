"""Between the admin API's bodies (schemas.py) and the control plane's records."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from msgspec import UNSET

from vigil.engine.request import Priority
from vigil.platform.api.admin.schemas import (
    AuditOut,
    ClassLimitsBody,
    DeploymentIn,
    DeploymentOut,
    DeploymentPatch,
    FallbackBody,
    KeyOut,
    LimitsBody,
    LongPromptPoolBody,
    ModelOut,
    ReplicaOut,
    SLOBody,
    UserOut,
    VersionKeyOut,
    VersionOut,
    WebhookOut,
)
from vigil.platform.control.access.records import ApiKeyRecord, UserRecord
from vigil.platform.control.audit.records import AuditRecord
from vigil.platform.control.deployments.records import DeploymentDraft, DeploymentRecord, VersionKey
from vigil.platform.control.replicas.records import ReplicaRecord
from vigil.platform.control.specs import (
    ClassLimits,
    FallbackSpec,
    LongPromptPool,
    SLOTargets,
    VersionRef,
    default_limits,
)
from vigil.platform.control.versions.records import ModelRecord, VersionRecord
from vigil.platform.control.webhooks.records import WebhookRecord


def model_out(m: ModelRecord) -> ModelOut:
    return ModelOut(name=m.name, kind=m.kind, description=m.description, created_at=m.created_at)


def version_out(v: VersionRecord) -> VersionOut:
    ref = v.ref
    return VersionOut(
        model=ref.model,
        version=ref.version,
        key=ref.key,
        kind=ref.kind,
        format=ref.format,
        artifact=ref.artifact,
        checksum=ref.checksum,
        params=dict(ref.params),
        status=v.status,
        error=v.error,
        source=v.source,
        created_at=v.created_at,
        updated_at=v.updated_at,
    )


def _key_out(ref: VersionRef) -> VersionKeyOut:
    return VersionKeyOut(model=ref.model, version=ref.version)


def limits_body(limits: dict[Priority, ClassLimits]) -> LimitsBody:
    def one(p: Priority) -> ClassLimitsBody:
        return ClassLimitsBody(
            max_queue=limits[p].max_queue, max_queue_wait_s=limits[p].max_queue_wait_s
        )

    return LimitsBody(interactive=one(Priority.INTERACTIVE), batch=one(Priority.BATCH))


def deployment_out(r: DeploymentRecord) -> DeploymentOut:
    spec = r.spec
    fb, pool = spec.fallback, spec.long_prompt_pool
    return DeploymentOut(
        name=spec.name,
        revision=r.revision,
        stable=_key_out(spec.stable),
        canary=_key_out(spec.canary) if spec.canary is not None else None,
        canary_weight=spec.canary_weight,
        max_prompt_tokens=spec.max_prompt_tokens,
        max_tokens=spec.max_tokens,
        limits=limits_body(spec.limits),
        fallback=None
        if fb is None
        else FallbackBody(deployment=fb.deployment, trigger=fb.trigger, threshold_s=fb.threshold_s),
        long_prompt_pool=None
        if pool is None
        else LongPromptPoolBody(
            min_prompt_tokens=pool.min_prompt_tokens,
            max_queue=pool.max_queue,
            max_num_seqs=pool.max_num_seqs,
        ),
        slo=slo_body(spec.slo),
        created_at=r.created_at,
        updated_at=r.updated_at,
    )


def slo_body(slo: SLOTargets) -> SLOBody:
    return SLOBody(**asdict(slo))


def slo_targets(body: SLOBody) -> SLOTargets:
    return SLOTargets(
        ttft_p99_s=body.ttft_p99_s,
        min_tokens_per_s=body.min_tokens_per_s,
        batch_shed_fraction=body.batch_shed_fraction,
        availability_target=body.availability_target,
        window_s=body.window_s,
    )


def _limits(body: LimitsBody) -> dict[Priority, ClassLimits]:
    return {
        Priority.INTERACTIVE: ClassLimits(
            body.interactive.max_queue, body.interactive.max_queue_wait_s
        ),
        Priority.BATCH: ClassLimits(body.batch.max_queue, body.batch.max_queue_wait_s),
    }


def _fallback(body: FallbackBody | None) -> FallbackSpec | None:
    if body is None:
        return None
    return FallbackSpec(body.deployment, body.trigger, body.threshold_s)


def _pool(body: LongPromptPoolBody | None) -> LongPromptPool | None:
    if body is None:
        return None
    return LongPromptPool(body.min_prompt_tokens, body.max_queue, body.max_num_seqs)


def new_draft(body: DeploymentIn) -> DeploymentDraft:
    return DeploymentDraft(
        stable=VersionKey(body.model, body.version),
        max_prompt_tokens=body.max_prompt_tokens,
        max_tokens=body.max_tokens,
        limits=_limits(body.limits) if body.limits is not None else default_limits(),
        fallback=_fallback(body.fallback),
        long_prompt_pool=_pool(body.long_prompt_pool),
    )


def patched_draft(draft: DeploymentDraft, body: DeploymentPatch) -> DeploymentDraft:
    """`draft` with the fields the PATCH body sets."""
    changes: dict[str, Any] = {}
    if body.model is not UNSET or body.version is not UNSET:
        model = body.model if body.model is not UNSET else draft.stable.model
        version = body.version if body.version is not UNSET else draft.stable.version
        changes["stable"] = VersionKey(model, version)
    if body.max_prompt_tokens is not UNSET:
        changes["max_prompt_tokens"] = body.max_prompt_tokens
    if body.max_tokens is not UNSET:
        changes["max_tokens"] = body.max_tokens
    if body.limits is not UNSET:
        changes["limits"] = _limits(body.limits)
    if body.fallback is not UNSET:
        changes["fallback"] = _fallback(body.fallback)
    if body.long_prompt_pool is not UNSET:
        changes["long_prompt_pool"] = _pool(body.long_prompt_pool)
    return replace(draft, **changes)


def webhook_out(w: WebhookRecord) -> WebhookOut:
    return WebhookOut(
        name=w.name,
        url=w.url,
        events=[e.value for e in w.events],
        enabled=w.enabled,
        secret_hint=w.secret_hint,
        created_at=w.created_at,
    )


def key_out(k: ApiKeyRecord) -> KeyOut:
    return KeyOut(
        name=k.name,
        key_prefix=k.key_prefix,
        priority="batch" if k.priority is Priority.BATCH else "interactive",
        models=sorted(k.models) if k.models is not None else None,
        rate_limit_per_minute=k.rate_limit_per_minute,
        created_at=k.created_at,
        revoked_at=k.revoked_at,
    )


def user_out(u: UserRecord) -> UserOut:
    return UserOut(
        username=u.username, role=u.role, created_at=u.created_at, disabled_at=u.disabled_at
    )


def audit_out(a: AuditRecord) -> AuditOut:
    return AuditOut(
        id=a.id,
        at=a.at,
        actor=a.actor,
        action=a.action,
        entity_type=a.entity_type,
        entity_name=a.entity_name,
        before=a.before,
        after=a.after,
    )


def replica_out(r: ReplicaRecord) -> ReplicaOut:
    return ReplicaOut(
        id=r.id,
        address=r.address,
        device=r.device,
        memory_bytes=r.memory_bytes,
        status=r.status,
        versions=list(r.versions),
        stats=r.stats,
        registered_at=r.registered_at,
        last_heartbeat_at=r.last_heartbeat_at,
    )
