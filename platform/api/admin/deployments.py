"""`/api/admin/deployments`: deployments, canaries and SLOs: the controller (thin:
validate -> service -> body), its bodies, and the mapping to and from the deployments
domain's drafts and records. Writes that carry a `revision` are refused with 409 when it
is stale."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, replace
from datetime import datetime
from typing import Annotated, Any

from litestar import Controller, delete, get, patch, post, put
from litestar.params import FromPath, JSONBody
from msgspec import UNSET, Meta, Struct, UnsetType, structs

from vigil.engine.request import Priority
from vigil.platform.api.admin.auth import OPERATOR
from vigil.platform.api.admin.bodies import In, Name, Percent, PositiveInt, Revision, VersionName
from vigil.platform.api.admin.deps import Actor, Plane
from vigil.platform.api.admin.responses import error_responses, write_responses
from vigil.platform.control.deployments.records import (
    DeploymentDraft,
    DeploymentRecord,
    VersionKey,
)
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.specs import (
    DEFAULT_WINDOW_S,
    ClassLimits,
    FallbackSpec,
    FallbackTrigger,
    LongPromptPool,
    SLOTargets,
    VersionRef,
)

WRITE_ERRORS = write_responses(400, 404, 409)


class ClassLimitsBody(In):
    max_queue: Annotated[int, Meta(ge=0)]
    max_queue_wait_s: Annotated[float, Meta(gt=0)]


class LimitsBody(In):  # one field per priority class, named by its label
    interactive: ClassLimitsBody
    batch: ClassLimitsBody


class FallbackBody(In):
    deployment: Name
    trigger: FallbackTrigger
    threshold_s: Annotated[float, Meta(gt=0)]


class LongPromptPoolBody(In):
    min_prompt_tokens: PositiveInt
    max_queue: PositiveInt = 16
    max_num_seqs: PositiveInt = 4


class SLOBody(In):
    ttft_p99_s: float = 5.0
    min_tokens_per_s: float = 2.0
    batch_shed_fraction: float = 0.5
    availability_target: float = 0.999
    window_s: float = DEFAULT_WINDOW_S  # 30 days: pages need 1 h and 5 min of fast burn
    auto_rollback: bool = True  # roll back a canary whose SLIs are worse than stable's
    rollback_min_requests: int = 50  # ...once each has served this many in the window
    rollback_margin: float = 0.05  # ...by more than this share of bad requests
    admission_target: float = 0.99  # share of interactive requests not shed (429)


class DeploymentIn(In):
    name: Name  # what clients send as `model`
    model: Name
    version: VersionName  # the stable version
    max_prompt_tokens: PositiveInt | None = None
    max_tokens: PositiveInt | None = None
    limits: LimitsBody | None = None  # default: 64 / 30 s interactive, 256 / 120 s batch
    fallback: FallbackBody | None = None
    long_prompt_pool: LongPromptPoolBody | None = None
    slo: SLOBody | None = None


class DeploymentPatch(In):
    revision: Revision  # the revision you read; a stale one gets 409
    model: Name | UnsetType = UNSET  # with version: switch the stable version outright
    version: str | UnsetType = UNSET
    max_prompt_tokens: PositiveInt | UnsetType | None = UNSET
    max_tokens: PositiveInt | UnsetType | None = UNSET
    limits: LimitsBody | UnsetType = UNSET
    fallback: FallbackBody | UnsetType | None = UNSET
    long_prompt_pool: LongPromptPoolBody | UnsetType | None = UNSET


class CanaryIn(In):
    version: VersionName
    weight: Percent  # percent of requests for the canary
    model: Name | None = None  # default: the stable version's model
    revision: Revision | None = None  # when given, a stale one gets 409


class ShadowIn(In):
    version: VersionName
    weight: Percent  # percent of the requests mirrored to it
    model: Name | None = None  # default: the stable version's model
    revision: Revision | None = None  # when given, a stale one gets 409


class ActionIn(In):
    revision: Revision | None = None  # when given, a stale one gets 409


class VersionKeyOut(Struct, kw_only=True):
    model: str
    version: str


class DeploymentOut(Struct, kw_only=True):
    name: str
    revision: int
    stable: VersionKeyOut
    canary: VersionKeyOut | None
    canary_weight: int
    shadow: VersionKeyOut | None
    shadow_weight: int
    max_prompt_tokens: int | None
    max_tokens: int | None
    limits: LimitsBody
    fallback: FallbackBody | None
    long_prompt_pool: LongPromptPoolBody | None
    slo: SLOBody
    created_at: datetime
    updated_at: datetime


class StableHistoryOut(Struct, kw_only=True):
    version: VersionKeyOut  # stable until `action` replaced it
    revision: int  # the deployment's revision while it was stable
    action: str
    actor: str
    replaced_at: datetime
    restored_at: datetime | None  # when a roll back brought it back


def deployment_out(r: DeploymentRecord) -> DeploymentOut:
    spec = r.spec
    fb, pool = spec.fallback, spec.long_prompt_pool
    return DeploymentOut(
        name=spec.name,
        revision=r.revision,
        stable=_key_out(spec.stable),
        canary=_key_out(spec.canary) if spec.canary is not None else None,
        canary_weight=spec.canary_weight,
        shadow=_key_out(spec.shadow) if spec.shadow is not None else None,
        shadow_weight=spec.shadow_weight,
        max_prompt_tokens=spec.max_prompt_tokens,
        max_tokens=spec.max_tokens,
        limits=LimitsBody(**{p.label: ClassLimitsBody(**asdict(spec.limits[p])) for p in Priority}),
        fallback=FallbackBody(**asdict(fb)) if fb is not None else None,
        long_prompt_pool=LongPromptPoolBody(**asdict(pool)) if pool is not None else None,
        slo=SLOBody(**asdict(spec.slo)),
        created_at=r.created_at,
        updated_at=r.updated_at,
    )


def _key_out(ref: VersionRef) -> VersionKeyOut:
    return VersionKeyOut(model=ref.model, version=ref.version)


def new_draft(body: DeploymentIn, limits: Mapping[Priority, ClassLimits]) -> DeploymentDraft:
    """`limits`: the deployment's when the body has none (the gateway's defaults)."""
    return DeploymentDraft(
        stable=VersionKey(body.model, body.version),
        max_prompt_tokens=body.max_prompt_tokens,
        max_tokens=body.max_tokens,
        limits=_limits(body.limits) if body.limits is not None else limits,
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


def _limits(body: LimitsBody) -> dict[Priority, ClassLimits]:
    return {p: ClassLimits(**structs.asdict(getattr(body, p.label))) for p in Priority}


def _fallback(body: FallbackBody | None) -> FallbackSpec | None:
    return FallbackSpec(**structs.asdict(body)) if body is not None else None


def _pool(body: LongPromptPoolBody | None) -> LongPromptPool | None:
    return LongPromptPool(**structs.asdict(body)) if body is not None else None


async def _version_key(
    plane: ControlPlane, name: str, model: str | None, version: str
) -> VersionKey:
    """The version named, of the stable version's model when the body names none."""
    if model is None:
        model = (await plane.deployments.get(name)).spec.stable.model
    return VersionKey(model, version)


def _revision(data: ActionIn | None) -> int | None:
    return data.revision if data is not None else None


class DeploymentController(Controller):
    path = "/deployments"

    @get("/", summary="List deployments", responses=error_responses())
    async def list_deployments(self, plane: Plane) -> list[DeploymentOut]:
        return [deployment_out(d) for d in await plane.deployments.list()]

    @post("/", summary="Create a deployment", opt=OPERATOR, responses=write_responses(400, 409))
    async def create_deployment(
        self, plane: Plane, actor: Actor, data: JSONBody[DeploymentIn]
    ) -> DeploymentOut:
        slo = SLOTargets(**structs.asdict(data.slo)) if data.slo is not None else None
        draft = new_draft(data, plane.default_limits)
        record = await plane.deployments.create(data.name, draft, slo=slo, actor=actor)
        return deployment_out(record)

    @get("/{name:str}", summary="A deployment", responses=error_responses(404))
    async def get_deployment(self, plane: Plane, name: FromPath[str]) -> DeploymentOut:
        return deployment_out(await plane.deployments.get(name))

    @patch(
        "/{name:str}",
        summary="Change a deployment",
        description="Send the `revision` you read; fields left out keep their value and "
        "null clears one. A stale revision gets 409 naming the current one.",
        opt=OPERATOR,
        responses=WRITE_ERRORS,
    )
    async def update_deployment(
        self, plane: Plane, actor: Actor, name: FromPath[str], data: JSONBody[DeploymentPatch]
    ) -> DeploymentOut:
        current = await plane.deployments.get(name)
        draft = patched_draft(current.draft, data)
        record = await plane.deployments.update(name, draft, revision=data.revision, actor=actor)
        return deployment_out(record)

    @post(
        "/{name:str}/canary",
        summary="Set the canary version and its share of traffic",
        opt=OPERATOR,
        status_code=200,
        responses=WRITE_ERRORS,
    )
    async def set_canary(
        self, plane: Plane, actor: Actor, name: FromPath[str], data: JSONBody[CanaryIn]
    ) -> DeploymentOut:
        key = await _version_key(plane, name, data.model, data.version)
        record = await plane.deployments.set_canary(
            name, key, data.weight, revision=data.revision, actor=actor
        )
        return deployment_out(record)

    @put(
        "/{name:str}/shadow",
        summary="Mirror a share of the requests to a shadow version",
        description="The shadow's answers are discarded; its requests run at the lowest "
        "priority and are dropped first under load; its SLIs are compared with the stable "
        "version's (GET /api/admin/slo/{name}).",
        opt=OPERATOR,
        responses=WRITE_ERRORS,
    )
    async def set_shadow(
        self, plane: Plane, actor: Actor, name: FromPath[str], data: JSONBody[ShadowIn]
    ) -> DeploymentOut:
        key = await _version_key(plane, name, data.model, data.version)
        record = await plane.deployments.set_shadow(
            name, key, data.weight, revision=data.revision, actor=actor
        )
        return deployment_out(record)

    @delete(
        "/{name:str}/shadow",
        summary="Stop mirroring requests to the shadow version",
        opt=OPERATOR,
        status_code=200,
        responses=write_responses(404, 409),
    )
    async def clear_shadow(self, plane: Plane, actor: Actor, name: FromPath[str]) -> DeploymentOut:
        return deployment_out(await plane.deployments.clear_shadow(name, actor=actor))

    @post(
        "/{name:str}/promote",
        summary="Make the canary the stable version",
        opt=OPERATOR,
        status_code=200,
        responses=WRITE_ERRORS,
    )
    async def promote(
        self,
        plane: Plane,
        actor: Actor,
        name: FromPath[str],
        data: JSONBody[ActionIn | None] = None,
    ) -> DeploymentOut:
        record = await plane.deployments.promote(name, revision=_revision(data), actor=actor)
        return deployment_out(record)

    @post(
        "/{name:str}/rollback",
        summary="Drop the canary; without one, restore the stable version before the last "
        "promotion (409 nothing_to_roll_back, or version_not_servable when it is retired)",
        opt=OPERATOR,
        status_code=200,
        responses=WRITE_ERRORS,
    )
    async def rollback(
        self,
        plane: Plane,
        actor: Actor,
        name: FromPath[str],
        data: JSONBody[ActionIn | None] = None,
    ) -> DeploymentOut:
        record = await plane.deployments.rollback(name, revision=_revision(data), actor=actor)
        return deployment_out(record)

    @get(
        "/{name:str}/history",
        summary="The stable versions a deployment served before, newest first",
        responses=error_responses(404),
    )
    async def history(self, plane: Plane, name: FromPath[str]) -> list[StableHistoryOut]:
        return [
            StableHistoryOut(
                version=VersionKeyOut(model=h.version.model, version=h.version.version),
                revision=h.revision,
                action=h.action,
                actor=h.actor,
                replaced_at=h.replaced_at,
                restored_at=h.restored_at,
            )
            for h in await plane.deployments.stable_history(name)
        ]

    @get("/{name:str}/slo", summary="A deployment's SLO targets", responses=error_responses(404))
    async def get_slo(self, plane: Plane, name: FromPath[str]) -> SLOBody:
        return SLOBody(**asdict(await plane.deployments.get_slo(name)))

    @put(
        "/{name:str}/slo",
        summary="Set a deployment's SLO targets",
        opt=OPERATOR,
        responses=write_responses(400, 404),
    )
    async def set_slo(
        self, plane: Plane, actor: Actor, name: FromPath[str], data: JSONBody[SLOBody]
    ) -> SLOBody:
        slo = SLOTargets(**structs.asdict(data))
        return SLOBody(**asdict(await plane.deployments.set_slo(name, slo, actor=actor)))
