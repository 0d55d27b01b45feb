"""The serving view of the control plane, as plain frozen records.

A model version names an artifact (weights) and its parameters; a deployment is the name
clients send as `model`: a stable version, optionally a canary version with a share of
the traffic, and the limits that protect it (caps, queues, SLO targets, fallback,
long-prompt pool). The gateway routes and admits from these records; the worker loads
the versions they name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from vigil.engine.artifacts import BUNDLED_PREFIX
from vigil.engine.bundled import ModelFormat, ModelKind, bundled_source
from vigil.engine.request import Priority


class FallbackTrigger(StrEnum):
    QUEUE_WAIT = "queue_wait"  # the oldest queued interactive request has waited this long
    PREDICTED_TTFT = "predicted_ttft"  # a new interactive request would wait this long


@dataclass(frozen=True, slots=True)
class VersionRef:
    model: str
    version: str
    kind: ModelKind
    format: ModelFormat
    artifact: str  # "bundled:<name>", a GGUF file, or a Hugging Face folder
    checksum: str | None = None  # SHA-256 (engine/artifacts.py), verified at load
    # Load options (dtype, quantization) and sampling defaults (temperature, top_p, top_k,
    # max_tokens, stop) of this version, as version_params() pairs.
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> str:
        """What engines and metrics call this version: `model@version`."""
        return f"{self.model}@{self.version}"

    def param(self, name: str, default: Any = None) -> Any:
        return dict(self.params).get(name, default)


def version_params(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A version's params as VersionRef keeps them: sorted pairs, a list (stop) as a
    tuple, so that the record stays hashable."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))


def bundled_version(name: str) -> VersionRef:
    """The version a bundled model is registered as: its package's version."""
    source = bundled_source(name)
    return VersionRef(
        name,
        source.version,
        source.kind,
        source.format,
        BUNDLED_PREFIX + name,
        params=tuple(sorted(source.defaults)),
    )


@dataclass(frozen=True, slots=True)
class ClassLimits:
    """Per priority class: how many may queue (admitted, not started) and for how long."""

    max_queue: int
    max_queue_wait_s: float


# How long an interactive request may wait to start when its deployment does not say
# (`vigil serve --max-queue-wait`). A batch request may wait BATCH_WAIT_FACTOR times as
# long: batch traffic is queued behind interactive traffic by design, and its clients
# are there for throughput, not for a first token.
DEFAULT_MAX_QUEUE_WAIT_S = 30.0
BATCH_WAIT_FACTOR = 4


def default_limits(
    max_queue_wait_s: float = DEFAULT_MAX_QUEUE_WAIT_S,
) -> dict[Priority, ClassLimits]:
    """The limits of a deployment made without its own: those of the bundled models,
    of a deployments-file entry for each class or field it leaves out, of one created over
    the admin API without `limits`."""
    return {
        Priority.INTERACTIVE: ClassLimits(max_queue=64, max_queue_wait_s=max_queue_wait_s),
        Priority.BATCH: ClassLimits(
            max_queue=256, max_queue_wait_s=BATCH_WAIT_FACTOR * max_queue_wait_s
        ),
    }


DEFAULT_WINDOW_S = 30 * 86400.0


@dataclass(frozen=True, slots=True)
class SLOTargets:
    # Defaults that a CPU serving a small model meets at moderate load; set real
    # targets per deployment.
    ttft_p99_s: float = 5.0  # interactive time to first token
    min_tokens_per_s: float = 2.0  # per stream, after the first token
    # Batch requests are shed once the predicted interactive TTFT passes this share of
    # the target, so the rest of the headroom stays with interactive traffic.
    batch_shed_fraction: float = 0.5
    # The error budget: the share of requests that must meet the targets over window_s.
    availability_target: float = 0.999
    # The SRE workbook's 30 days: its pages need an hour (and the last 5 minutes) of
    # fast burn, so a burst of seconds does not page. Shorter windows scale the alert
    # windows down with them (1 hour: 5 s and 417 ms), for drills.
    window_s: float = DEFAULT_WINDOW_S
    # A canary whose bad share of some SLI is over the stable version's by more than
    # rollback_margin, once each has served rollback_min_requests in the window, is
    # rolled back by the system.
    auto_rollback: bool = True
    rollback_min_requests: int = 50
    rollback_margin: float = 0.05
    # The share of interactive requests that must be admitted (not shed with a 429) over
    # window_s; batch requests are shed first by design and do not count.
    admission_target: float = 0.99


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
    stable: VersionRef
    canary: VersionRef | None = None
    canary_weight: int = 0  # percent of requests that go to the canary, 0-100
    # A version sent a mirrored copy of `shadow_weight` percent of the requests the
    # deployment serves itself; its answers are discarded, its SLIs compared with stable's.
    shadow: VersionRef | None = None
    shadow_weight: int = 0
    max_prompt_tokens: int | None = None  # None: the model's context window
    max_tokens: int | None = None  # None: what the context window leaves
    limits: dict[Priority, ClassLimits] = field(default_factory=default_limits)
    slo: SLOTargets = field(default_factory=SLOTargets)
    fallback: FallbackSpec | None = None
    long_prompt_pool: LongPromptPool | None = None

    @property
    def versions(self) -> list[VersionRef]:
        """Every version the deployment runs: stable, canary, shadow."""
        return [v for v in (self.stable, self.canary, self.shadow) if v is not None]
