"""What a generation request is, inside the engine, and what it emits."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any, NewType

RequestId = NewType("RequestId", str)
MAX_TOP_LOGPROBS = 20
SEED_MAX = 2**63 - 1  # torch takes seeds in [-2**63, 2**64); choices count up from one


class Priority(IntEnum):
    """Lower value is served first."""

    INTERACTIVE = 0
    BATCH = 1

    @property
    def label(self) -> str:
        """How the class is spelled everywhere outside the engine: in the database,
        headers, flags, config files and metric labels."""
        return self.name.lower()

    @classmethod
    def from_label(cls, label: str) -> Priority | None:
        return _PRIORITY_LABELS.get(label)


_PRIORITY_LABELS = {p.label: p for p in Priority}


class ConstraintKind(StrEnum):
    JSON_SCHEMA = "json_schema"  # text: the schema, canonical JSON
    JSON_OBJECT = "json_object"  # any JSON object; text is empty
    REGEX = "regex"  # text: the pattern the whole output matches
    GRAMMAR = "grammar"  # text: a Lark grammar (llguidance's dialect)


@dataclass(frozen=True, slots=True)
class Constraint:
    """What the output must be. Compiled once per distinct (kind, text) and cached, so
    build JSON schemas with `json_schema`, which writes them in one compact form."""

    kind: ConstraintKind
    text: str = ""

    @classmethod
    def json_schema(cls, schema: dict[str, Any] | str) -> Constraint:
        """A schema as a dict or JSON text; text that is not a JSON object raises
        GrammarError (engine/grammar.py) through `canonical_schema`."""
        from vigil.engine.grammar import canonical_schema

        return cls(ConstraintKind.JSON_SCHEMA, canonical_schema(schema))

    @classmethod
    def json_object(cls) -> Constraint:
        return cls(ConstraintKind.JSON_OBJECT)


class FinishReason(StrEnum):
    STOP = "stop"  # EOS token or a stop string
    LENGTH = "length"  # max_tokens or the context window
    ABORT = "abort"  # the client went away or cancelled
    TIMEOUT = "timeout"  # waited in the queue past its deadline, never started
    ERROR = "error"  # the engine failed while running it


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0  # 0 means greedy
    top_k: int = 0  # 0 means no top-k cut
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0  # EOS cannot be sampled before this many output tokens
    # Output that must follow a grammar (min_tokens does not apply: the grammar says
    # when it may end). None: free text.
    constraint: Constraint | None = None
    # Log-probabilities of each sampled token and of its `logprobs` best alternatives
    # (0-20; 0: the sampled token's alone). None: not computed at all.
    logprobs: int | None = None
    # (token id, bias) pairs added to the logits before sampling.
    logit_bias: tuple[tuple[int, float], ...] = ()
    # Choices of one prompt: choice i draws with seed + i. The prompt is prefilled once:
    # the other choices start once the first has its first token, from the blocks it
    # left in the prefix cache (see engine/llm_engine.py).
    n: int = 1
    # Log-probabilities of the prompt's tokens (each given the ones before it) and of
    # `prompt_logprobs` best alternatives, from the model's plain log-softmax. None: not
    # computed. A request that asks prefills its whole prompt (no prefix-cache hits).
    prompt_logprobs: int | None = None

    def __post_init__(self) -> None:
        # The API validates these with messages for users; this guards the engine's
        # own contract (a sampler fed top_p=0 would mask every token).
        assert self.max_tokens >= 1, f"max_tokens {self.max_tokens} < 1"
        assert self.temperature >= 0.0, f"temperature {self.temperature} < 0"
        assert 0.0 < self.top_p <= 1.0, f"top_p {self.top_p} not in (0, 1]"
        assert self.top_k >= 0, f"top_k {self.top_k} < 0"
        assert 0 <= self.min_tokens <= self.max_tokens, f"min_tokens {self.min_tokens} out of range"
        assert self.logprobs is None or 0 <= self.logprobs <= MAX_TOP_LOGPROBS, (
            f"logprobs {self.logprobs} not in [0, {MAX_TOP_LOGPROBS}]"
        )
        assert all(math.isfinite(b) for _, b in self.logit_bias), "logit_bias not finite"
        assert self.n >= 1, f"n {self.n} < 1"
        assert self.seed is None or self.seed + self.n - 1 <= SEED_MAX, "seed out of range"
        assert self.prompt_logprobs is None or 0 <= self.prompt_logprobs <= MAX_TOP_LOGPROBS, (
            f"prompt_logprobs {self.prompt_logprobs} not in [0, {MAX_TOP_LOGPROBS}]"
        )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1


@dataclass(slots=True)
class RequestClock:
    """Monotonic timestamps (time.monotonic) from which every latency is derived."""

    arrival_ts: float
    scheduled_ts: float | None = None
    first_token_ts: float | None = None
    last_token_ts: float | None = None
    finished_ts: float | None = None

    @property
    def queue_time_s(self) -> float | None:
        return None if self.scheduled_ts is None else self.scheduled_ts - self.arrival_ts

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_ts is None else self.first_token_ts - self.arrival_ts


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token_id: int
    logprob: float  # natural log, finite


@dataclass(frozen=True, slots=True)
class SampledLogprobs:
    """One generated token's log-probability and its best alternatives (most likely
    first, at most SamplingParams.logprobs of them, only tokens with a chance), read
    from the distribution it was drawn from (see engine/sampler.py)."""

    token_id: int
    logprob: float
    top: tuple[TokenLogprob, ...]


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """New output of choice `index`: `text` is safe to show (never half a UTF-8
    character, never part of a stop string); it may be empty while text is held back.
    `logprobs` is one record per token id when the request asked for them, else empty.
    `prompt_logprobs`, on the first event of choice 0 of a request that asked: one
    record per prompt token after the first (which has nothing before it)."""

    text: str
    token_ids: tuple[int, ...]
    token_ts: float
    logprobs: tuple[SampledLogprobs, ...] = ()
    index: int = 0
    prompt_logprobs: tuple[SampledLogprobs, ...] = ()


@dataclass(slots=True)
class StepTimes:
    """A sequence's part of the engine steps it ran in, before its first token (prefill)
    and after (decode). A step computes every scheduled sequence's tokens at once, so its
    time is split by tokens: `own` is the share of the sequence's own tokens, `shared` the
    rest of the batch's, time it waited behind other sequences in that step. (Attention
    over a long context costs more per token than a decode's; the split by tokens is the
    measure the scheduler's budget uses too.) A phase longer than own + shared spent the
    difference between steps, or in steps that did not schedule it."""

    prefill_own_s: float = 0.0
    prefill_shared_s: float = 0.0
    decode_own_s: float = 0.0
    decode_shared_s: float = 0.0

    def charge(
        self, step_s: float, num_own_tokens: int, num_step_tokens: int, prefill: bool
    ) -> None:
        assert 0 < num_own_tokens <= num_step_tokens, f"{num_own_tokens} of {num_step_tokens}"
        own_s = step_s * num_own_tokens / num_step_tokens
        if prefill:
            self.prefill_own_s += own_s
            self.prefill_shared_s += step_s - own_s
        else:
            self.decode_own_s += own_s
            self.decode_shared_s += step_s - own_s


@dataclass(frozen=True, slots=True)
class FinishEvent:
    reason: FinishReason
    text: str  # any held-back text released at the end
    num_prompt_tokens: int
    num_output_tokens: int
    clock: RequestClock
    error: str | None = None
    num_cached_prompt_tokens: int = 0  # found in the prefix cache
    num_prefill_chunks: int = 0  # steps the prompt was prefilled in
    index: int = 0  # the choice it ends: a request of n choices ends with n of these
    step_times: StepTimes | None = None  # None: not measured (it never ran, or a fake)


EngineEvent = TokenEvent | FinishEvent


@dataclass(slots=True)
class GenerationRequest:
    request_id: RequestId
    prompt_ids: list[int]
    params: SamplingParams
    priority: Priority = Priority.INTERACTIVE
    clock: RequestClock = field(default_factory=lambda: RequestClock(0.0))
    # Monotonic time after which a request that has not started yet is dropped
    # with FinishReason.TIMEOUT instead of starting late. None: no deadline.
    deadline_ts: float | None = None
