"""What the gateway and its workers say to each other over HTTP (msgspec JSON).

    worker                                   gateway
      | -- POST /internal/workers/register --> |  id, address, device, memory
      | <-------- Assignment ----------------- |  the engine slots to run
      | -- POST /internal/workers/{id}/heartbeat (every second) -->
      |      slot states, limits, stats, step costs
      | <-------- Assignment ----------------- |  (changes when deployments change)
      |                                        |
      | <-- POST /internal/generate ---------- |  one request: ids in, events out
      | --- newline-delimited JSON events ---> |  (closing the stream aborts it)
      | <-- POST /internal/embed ------------- |  token ids in, vectors out

Every call carries `Authorization: Bearer <worker token>`.
"""

from __future__ import annotations

import hmac
from typing import Any, Literal

from msgspec import Struct, structs

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.engine.precision import Precision, runs_as
from vigil.engine.request import (
    Constraint,
    ConstraintKind,
    SampledLogprobs,
    SamplingParams,
    TokenLogprob,
)
from vigil.engine.stats import EngineStats
from vigil.platform.control.specs import VersionRef, version_params
from vigil.platform.errors import Unauthorized
from vigil.platform.forecast.costs import DecodePoint, StepCosts


class VersionWire(Struct, frozen=True):
    model: str
    version: str
    kind: str
    format: str
    artifact: str
    checksum: str | None = None
    params: dict[str, Any] = {}

    @classmethod
    def of(cls, v: VersionRef) -> VersionWire:
        return cls(
            v.model, v.version, v.kind.value, v.format.value, v.artifact, v.checksum, dict(v.params)
        )

    def ref(self) -> VersionRef:
        return VersionRef(
            self.model,
            self.version,
            ModelKind(self.kind),
            ModelFormat(self.format),
            self.artifact,
            self.checksum,
            version_params(self.params),
        )


class SlotSpec(Struct, frozen=True):
    """One engine a worker should run (see worker.runtime.EngineSlot)."""

    key: str
    version: VersionWire
    max_num_seqs: int | None = None


class Assignment(Struct):
    slots: list[SlotSpec]
    heartbeat_interval_s: float = 1.0


class RegisterRequest(Struct):
    worker_id: str
    address: str  # base URL the gateway calls, e.g. http://127.0.0.1:9001
    device: str
    memory_bytes: int
    pid: int


class SlotLimits(Struct):
    max_model_len: int
    kv_capacity_tokens: int
    max_num_seqs: int
    # For the capacity planner (0 from a worker that predates them).
    block_size: int = 0
    kv_bytes_per_token: int = 0
    max_num_batched_tokens: int = 0
    prefix_caching: bool = False  # whether the engine reuses cached prompt blocks


class DecodePointWire(Struct, frozen=True):
    batch_size: float  # mean number of sequences in the steps measured
    step_s: float


class CostsWire(Struct):
    """What the engine's steps cost now (forecast.costs.StepCosts; worker.profile)."""

    decode: list[DecodePointWire]
    mixed_s: float
    seq_s: float
    token_s: float
    pair_s: float

    @classmethod
    def of(cls, costs: StepCosts) -> CostsWire:
        points = [DecodePointWire(p.batch_size, p.step_s) for p in costs.decode]
        return cls(points, costs.mixed_s, costs.seq_s, costs.token_s, costs.pair_s)

    def costs(self) -> StepCosts:
        points = tuple(DecodePoint(p.batch_size, p.step_s) for p in self.decode)
        return StepCosts(points, self.mixed_s, self.seq_s, self.token_s, self.pair_s)


class StatsWire(Struct, frozen=True):
    """An engine's stats snapshot (engine.stats.EngineStats) without its last step: the
    gateway reads queues, KV use and prefix hits; step timings stay on the worker's own
    /metrics."""

    num_waiting_interactive: int
    num_waiting_batch: int
    num_running: int
    num_kv_blocks_total: int
    num_kv_blocks_used: int
    num_kv_blocks_cached: int
    num_preemptions: int
    num_prefix_queried_tokens: int
    num_prefix_hit_tokens: int
    num_steps: int

    @classmethod
    def of(cls, stats: EngineStats) -> StatsWire:
        return cls(**{name: getattr(stats, name) for name in cls.__struct_fields__})

    def stats(self) -> EngineStats:
        return EngineStats(**structs.asdict(self), last_step=None)


class PrecisionWire(Struct, frozen=True):
    """What a slot's weights run as and why (engine.precision.Precision)."""

    runs_as: str  # int4, int8, or the float dtype
    quantization: str
    dtype: str
    reason: str

    @classmethod
    def of(cls, p: Precision) -> PrecisionWire:
        return cls(runs_as(p), p.quantization, p.dtype, p.reason)


class SlotReport(Struct):
    key: str
    state: Literal["loading", "ready", "failed", "draining"]
    progress: float = 0.0  # 0-1 while loading
    error: str | None = None
    limits: SlotLimits | None = None
    stats: StatsWire | None = None  # generation slots
    # Generation slots, ready: what its steps cost, for admission, routing and plans.
    costs: CostsWire | None = None
    precision: PrecisionWire | None = None  # once loaded


class Heartbeat(Struct):
    slots: list[SlotReport]


class ConstraintWire(Struct, frozen=True, array_like=True):
    kind: str  # engine.request.ConstraintKind
    text: str


class SamplingWire(Struct, frozen=True, omit_defaults=True):
    """A request's sampling (engine.request.SamplingParams)."""

    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: int | None
    stop: tuple[str, ...]
    ignore_eos: bool
    min_tokens: int
    constraint: ConstraintWire | None = None
    logprobs: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    n: int = 1
    prompt_logprobs: int | None = None

    @classmethod
    def of(cls, p: SamplingParams) -> SamplingWire:
        c = p.constraint
        return cls(
            p.max_tokens,
            p.temperature,
            p.top_k,
            p.top_p,
            p.seed,
            p.stop,
            p.ignore_eos,
            p.min_tokens,
            None if c is None else ConstraintWire(c.kind.value, c.text),
            p.logprobs,
            p.logit_bias,
            p.n,
            p.prompt_logprobs,
        )

    def params(self) -> SamplingParams:
        c = self.constraint
        return SamplingParams(
            self.max_tokens,
            self.temperature,
            self.top_k,
            self.top_p,
            self.seed,
            self.stop,
            self.ignore_eos,
            self.min_tokens,
            None if c is None else Constraint(ConstraintKind(c.kind), c.text),
            self.logprobs,
            self.logit_bias,
            self.n,
            self.prompt_logprobs,
        )


class GenerateCall(Struct):
    slot: str
    request_id: str
    prompt_ids: list[int]
    params: SamplingWire
    priority: int
    max_queue_wait_s: float | None  # relative: worker and gateway clocks differ


class LogprobWire(Struct, frozen=True, array_like=True):
    """engine.request.SampledLogprobs: [token id, logprob, [[id, logprob], ...]]."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]

    @classmethod
    def of(cls, lp: SampledLogprobs) -> LogprobWire:
        return cls(lp.token_id, lp.logprob, tuple((t.token_id, t.logprob) for t in lp.top))

    def record(self) -> SampledLogprobs:
        top = tuple(TokenLogprob(t, v) for t, v in self.top)
        return SampledLogprobs(self.token_id, self.logprob, top)


class TokenWire(Struct, tag="token", omit_defaults=True):
    text: str
    ids: list[int]
    index: int = 0  # the choice
    logprobs: list[LogprobWire] = []
    prompt_logprobs: list[LogprobWire] = []


class FinishWire(Struct, tag="finish"):
    reason: str
    text: str
    num_prompt_tokens: int
    num_output_tokens: int
    queue_s: float | None
    error: str | None = None
    cached_prompt_tokens: int = 0
    prefill_chunks: int = 0
    index: int = 0  # the choice
    # engine/request.py StepTimes: prefill own, prefill shared, decode own, decode shared
    step_times_s: tuple[float, float, float, float] | None = None


EventWire = TokenWire | FinishWire


class EmbedCall(Struct):
    slot: str
    token_ids: list[list[int]]  # per text, by the model's own tokenizer at the gateway


class EmbedResult(Struct):
    vectors: list[list[float]]  # one per row of token_ids, in order


def require_worker_token(authorization: str | None, token: str) -> None:
    """Every worker call, either way, carries `Bearer <token>`: compared in constant time
    so that its timing tells nothing about how much of a guess was right."""
    expected = f"Bearer {token}".encode()
    if not hmac.compare_digest((authorization or "").encode(), expected):
        raise Unauthorized(
            "worker calls need the worker token", scheme="Bearer", code="invalid_worker_token"
        )
