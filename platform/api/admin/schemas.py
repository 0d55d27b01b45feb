"""Request and response bodies of the admin API (`/api/admin/...`).

Unknown fields are refused, so that a typo is a 400 rather than a silent no-op. In a
PATCH body a field left out keeps its value (`UNSET`) and `null` clears it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType, field

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.platform.control.access.records import Role
from vigil.platform.control.replicas.records import ReplicaStatus
from vigil.platform.control.specs import FallbackTrigger
from vigil.platform.control.versions.records import VersionStatus

Name = Annotated[str, Meta(min_length=1, max_length=200)]
Percent = Annotated[int, Meta(ge=0, le=100)]
PositiveInt = Annotated[int, Meta(ge=1)]
Revision = Annotated[int, Meta(ge=1)]
PriorityName = Literal["interactive", "batch"]


class _In(Struct, forbid_unknown_fields=True, kw_only=True):
    pass


# ---- models and versions


class ModelIn(_In):
    name: Name
    kind: ModelKind = ModelKind.GENERATE
    description: Annotated[str, Meta(max_length=2000)] | None = None


class VersionIn(_In):
    version: Annotated[str, Meta(min_length=1, max_length=100)]
    artifact: Annotated[str, Meta(min_length=1, max_length=1000)]  # bundled:<name> or a path
    format: ModelFormat | None = None  # default: from the artifact
    checksum: Annotated[str, Meta(pattern="^[0-9a-fA-F]{64}$")] | None = None  # SHA-256
    params: dict[str, Any] = field(default_factory=dict)  # dtype, temperature, top_p, top_k


class ModelOut(Struct, kw_only=True):
    name: str
    kind: ModelKind
    description: str | None
    created_at: datetime


class VersionOut(Struct, kw_only=True):
    model: str
    version: str
    key: str  # model@version, as metrics and x-vigil-served-by name it
    kind: ModelKind
    format: ModelFormat
    artifact: str
    checksum: str | None
    params: dict[str, Any]
    status: VersionStatus
    error: str | None
    source: str  # where a worker last loaded it from
    created_at: datetime
    updated_at: datetime


class ModelDetailOut(ModelOut, kw_only=True):
    versions: list[VersionOut]


# ---- deployments


class ClassLimitsBody(_In):
    max_queue: Annotated[int, Meta(ge=0)]
    max_queue_wait_s: Annotated[float, Meta(gt=0)]


class LimitsBody(_In):
    interactive: ClassLimitsBody
    batch: ClassLimitsBody


class FallbackBody(_In):
    deployment: Name
    trigger: FallbackTrigger
    threshold_s: Annotated[float, Meta(gt=0)]


class LongPromptPoolBody(_In):
    min_prompt_tokens: PositiveInt
    max_queue: PositiveInt = 16
    max_num_seqs: PositiveInt = 4


class SLOBody(_In):
    ttft_p99_s: float = 5.0
    min_tokens_per_s: float = 2.0
    batch_shed_fraction: float = 0.5
    availability_target: float = 0.999
    window_s: float = 3600.0


class DeploymentIn(_In):
    name: Name  # what clients send as `model`
    model: Name
    version: Annotated[str, Meta(min_length=1, max_length=100)]  # the stable version
    max_prompt_tokens: PositiveInt | None = None
    max_tokens: PositiveInt | None = None
    limits: LimitsBody | None = None  # default: 64 / 30 s interactive, 256 / 120 s batch
    fallback: FallbackBody | None = None
    long_prompt_pool: LongPromptPoolBody | None = None
    slo: SLOBody | None = None


class DeploymentPatch(_In):
    revision: Revision  # the revision you read; a stale one gets 409
    model: Name | UnsetType = UNSET  # with version: switch the stable version outright
    version: str | UnsetType = UNSET
    max_prompt_tokens: PositiveInt | UnsetType | None = UNSET
    max_tokens: PositiveInt | UnsetType | None = UNSET
    limits: LimitsBody | UnsetType = UNSET
    fallback: FallbackBody | UnsetType | None = UNSET
    long_prompt_pool: LongPromptPoolBody | UnsetType | None = UNSET


class CanaryIn(_In):
    version: Annotated[str, Meta(min_length=1, max_length=100)]
    weight: Percent  # percent of requests for the canary
    model: Name | None = None  # default: the stable version's model
    revision: Revision | None = None  # when given, a stale one gets 409


class ActionIn(_In):
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
    max_prompt_tokens: int | None
    max_tokens: int | None
    limits: LimitsBody
    fallback: FallbackBody | None
    long_prompt_pool: LongPromptPoolBody | None
    slo: SLOBody
    created_at: datetime
    updated_at: datetime


# ---- webhooks, keys, users


class WebhookIn(_In):
    name: Name
    url: Annotated[str, Meta(min_length=1, max_length=2000)]
    events: list[str]  # slo.burn, slo.recovered, shed, fallback, canary.rollback, worker.down
    secret: str | None = None  # default: generated, and shown once in the answer
    enabled: bool = True


class WebhookPatch(_In):
    url: str | UnsetType = UNSET
    events: list[str] | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET


class WebhookOut(Struct, kw_only=True):
    name: str
    url: str
    events: list[str]
    enabled: bool
    secret_hint: str
    created_at: datetime


class WebhookCreated(WebhookOut, kw_only=True):
    secret: str  # shown this once


class KeyIn(_In):
    name: Name
    priority: PriorityName = "interactive"
    models: list[str] | None = None  # deployments it may use; null: all
    rate_limit_per_minute: PositiveInt | None = None


class KeyOut(Struct, kw_only=True):
    name: str
    key_prefix: str
    priority: PriorityName
    models: list[str] | None
    rate_limit_per_minute: int | None
    created_at: datetime
    revoked_at: datetime | None


class KeyCreated(KeyOut, kw_only=True):
    key: str  # shown this once; only its hash is stored


class UserIn(_In):
    username: Name
    password: Annotated[str, Meta(min_length=1, max_length=1024)]
    role: Role = Role.VIEWER


class UserPatch(_In):
    role: Role | UnsetType = UNSET
    disabled: bool | UnsetType = UNSET
    password: Annotated[str, Meta(min_length=1, max_length=1024)] | UnsetType = UNSET


class UserOut(Struct, kw_only=True):
    username: str
    role: Role
    created_at: datetime
    disabled_at: datetime | None


# ---- audit log, replicas


class AuditOut(Struct, kw_only=True):
    id: int
    at: datetime
    actor: str
    action: str
    entity_type: str
    entity_name: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class ReplicaOut(Struct, kw_only=True):
    id: str
    address: str
    device: str
    memory_bytes: int
    status: ReplicaStatus
    versions: list[str]
    stats: dict[str, Any]
    registered_at: datetime
    last_heartbeat_at: datetime
