"""A deployment as an operator edits it (`DeploymentDraft`: versions named, not
resolved) and as the domain hands it out (`DeploymentRecord`: the served spec with its
revision)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from vigil.engine.request import Priority
from vigil.platform.control.specs import (
    ClassLimits,
    DeploymentSpec,
    FallbackSpec,
    LongPromptPool,
    VersionRef,
    default_limits,
)


@dataclass(frozen=True, slots=True)
class VersionKey:
    model: str
    version: str

    def __str__(self) -> str:
        return f"{self.model}@{self.version}"

    @classmethod
    def of(cls, ref: VersionRef) -> VersionKey:
        return cls(ref.model, ref.version)


@dataclass(frozen=True, slots=True)
class DeploymentDraft:
    stable: VersionKey
    canary: VersionKey | None = None
    canary_weight: int = 0  # percent of requests that go to the canary, 0-100
    shadow: VersionKey | None = None
    shadow_weight: int = 0  # percent of requests mirrored to the shadow, 0-100
    max_prompt_tokens: int | None = None
    max_tokens: int | None = None
    limits: Mapping[Priority, ClassLimits] = field(default_factory=default_limits)
    fallback: FallbackSpec | None = None
    long_prompt_pool: LongPromptPool | None = None


@dataclass(frozen=True, slots=True)
class DeploymentRecord:
    spec: DeploymentSpec  # what the gateway serves
    revision: int  # pass it back to update: a stale one is refused
    created_at: datetime
    updated_at: datetime

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def draft(self) -> DeploymentDraft:
        return draft_of(self.spec)


def draft_of(spec: DeploymentSpec) -> DeploymentDraft:
    return DeploymentDraft(
        stable=VersionKey.of(spec.stable),
        canary=VersionKey.of(spec.canary) if spec.canary is not None else None,
        canary_weight=spec.canary_weight,
        shadow=VersionKey.of(spec.shadow) if spec.shadow is not None else None,
        shadow_weight=spec.shadow_weight,
        max_prompt_tokens=spec.max_prompt_tokens,
        max_tokens=spec.max_tokens,
        limits=dict(spec.limits),
        fallback=spec.fallback,
        long_prompt_pool=spec.long_prompt_pool,
    )


@dataclass(frozen=True, slots=True)
class StableHistoryRecord:
    """A stable version the deployment served until `action` replaced it."""

    version: VersionRef
    revision: int  # the deployment's revision while this version was stable
    action: str  # e.g. deployment.promote
    actor: str
    replaced_at: datetime
    restored_at: datetime | None  # when a roll back brought it back


@dataclass(frozen=True, slots=True)
class RollbackPlan:
    """What a roll back does now: drop the canary (`restores` None), or put back the
    stable version the last promotion replaced."""

    name: str
    revision: int  # the deployment's now; a roll back at another revision is refused
    leaving: VersionRef  # the canary dropped, or the stable version replaced
    restores: StableHistoryRecord | None
