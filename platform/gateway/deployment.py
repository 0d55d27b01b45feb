"""What a deployment is: the name clients send as `model`, the model behind it, and the
limits that protect it (caps, queues, SLO targets, fallback, long-prompt pool).

Read once at start-up from the settings file (`--config`), or built with defaults
for each bundled model.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from vigil.engine.request import Priority


class FallbackTrigger(StrEnum):
    QUEUE_WAIT = "queue_wait"  # the oldest queued interactive request has waited this long
    PREDICTED_TTFT = "predicted_ttft"  # a new interactive request would wait this long


@dataclass(frozen=True, slots=True)
class ClassLimits:
    """Per priority class: how many may queue (admitted, not started) and for how long."""

    max_queue: int
    max_queue_wait_s: float


@dataclass(frozen=True, slots=True)
class SLOTargets:
    # Defaults that a CPU serving a small model meets at moderate load; set real
    # targets per deployment.
    ttft_p99_s: float = 5.0  # interactive time to first token
    min_tokens_per_s: float = 2.0  # per stream, after the first token
    # Batch requests are shed once the predicted interactive TTFT passes this share of
    # the target, so the rest of the headroom stays with interactive traffic.
    batch_shed_fraction: float = 0.5


@dataclass(frozen=True, slots=True)
class FallbackSpec:
    deployment: str
    trigger: FallbackTrigger
    threshold_s: float


@dataclass(frozen=True, slots=True)
class LongPromptPool:
    """Prompts of at least min_prompt_tokens run on their own engine and queue."""

    min_prompt_tokens: int
    max_queue: int = 16
    max_num_seqs: int = 4


@dataclass(frozen=True, slots=True)
class DeploymentSpec:
    name: str
    model: str
    max_prompt_tokens: int | None = None  # None: the model's context window
    max_tokens: int | None = None  # None: what the context window leaves
    limits: dict[Priority, ClassLimits] = field(
        default_factory=lambda: {
            Priority.INTERACTIVE: ClassLimits(max_queue=64, max_queue_wait_s=30.0),
            Priority.BATCH: ClassLimits(max_queue=256, max_queue_wait_s=120.0),
        }
    )
    slo: SLOTargets = field(default_factory=SLOTargets)
    fallback: FallbackSpec | None = None
    long_prompt_pool: LongPromptPool | None = None


class ConfigError(ValueError):
    """The deployments file says something Vigil cannot use; the message says where."""


def load_deployments(path: Path, known_models: set[str]) -> list[DeploymentSpec]:
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    entries = raw.get("deployments")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected one or more [[deployments]] tables")
    specs = [_spec(entry, f"{path}: deployments[{i}]") for i, entry in enumerate(entries)]
    names = [s.name for s in specs]
    for spec in specs:
        if names.count(spec.name) > 1:
            raise ConfigError(f"{path}: deployment {spec.name!r} is defined twice")
        if spec.model not in known_models:
            raise ConfigError(
                f"{path}: deployment {spec.name!r} names unknown model "
                f"{spec.model!r} (known: {', '.join(sorted(known_models))})"
            )
        if spec.fallback and spec.fallback.deployment not in names:
            raise ConfigError(
                f"{path}: deployment {spec.name!r} falls back to "
                f"{spec.fallback.deployment!r}, which is not defined"
            )
        if spec.fallback and spec.fallback.deployment == spec.name:
            raise ConfigError(f"{path}: deployment {spec.name!r} cannot fall back to itself")
    return specs


def _spec(entry: dict[str, Any], where: str) -> DeploymentSpec:
    try:
        default = DeploymentSpec(name="", model="")
        limits = dict(default.limits)
        for key, priority in (("interactive", Priority.INTERACTIVE), ("batch", Priority.BATCH)):
            if key in entry:
                section = entry[key]
                base = limits[priority]
                limits[priority] = ClassLimits(
                    max_queue=int(section.get("max_queue", base.max_queue)),
                    max_queue_wait_s=float(section.get("max_queue_wait_s", base.max_queue_wait_s)),
                )
        slo = SLOTargets(**entry["slo"]) if "slo" in entry else SLOTargets()
        fallback = None
        if "fallback" in entry:
            fb = entry["fallback"]
            fallback = FallbackSpec(
                str(fb["deployment"]), FallbackTrigger(fb["trigger"]), float(fb["threshold_s"])
            )
        pool = LongPromptPool(**entry["long_prompt_pool"]) if "long_prompt_pool" in entry else None
        return DeploymentSpec(
            name=str(entry["name"]),
            model=str(entry.get("model", entry["name"])),
            max_prompt_tokens=entry.get("max_prompt_tokens"),
            max_tokens=entry.get("max_tokens"),
            limits=limits,
            slo=slo,
            fallback=fallback,
            long_prompt_pool=pool,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc!r}") from exc
