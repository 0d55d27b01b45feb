"""The synchronous engine core: schedule -> run -> update, one step at a time.

Not thread-safe; AsyncLLMEngine drives it from a single thread.

A request of n choices (SamplingParams.n) is n sequences, reported under the request's
id with their `index`. Choice 0 is scheduled first; the others wait outside the
scheduler until it has its first token, which means its prompt's blocks are computed
and named in the prefix cache: they then start at the head of the queue and find the
prompt there (full blocks shared, the last partial one copied), so the prompt is
prefilled once. Choice 0 ending before its first token (expired, failed, aborted) ends
the waiting ones with it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

from vigil.engine.config import EngineConfig
from vigil.engine.detokenizer import IncrementalDetokenizer
from vigil.engine.grammar import CompiledGrammar, GrammarCompiler
from vigil.engine.kv_cache import BlockPool
from vigil.engine.limits import ContextLimit, RequestRejected, fit_request
from vigil.engine.loaders.llm import LanguageModel
from vigil.engine.request import (
    EngineEvent,
    FinishEvent,
    FinishReason,
    GenerationRequest,
    Priority,
    RequestId,
    SampledLogprobs,
    TokenEvent,
)
from vigil.engine.runner import ModelRunner, StepResult, kv_bytes_per_token
from vigil.engine.scheduler import Scheduler, SchedulerConfig, StepPlan
from vigil.engine.sequence import Sequence
from vigil.engine.stats import EngineStats, StepStats, prefill_pairs_of

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Output:
    detok: IncrementalDetokenizer
    parent: RequestId  # the request the sequence is a choice of
    index: int  # which choice


@dataclass(slots=True)
class _Waiting:
    """Choices 1..n-1 of a request, until its choice 0 has its first token."""

    requests: list[GenerationRequest]
    grammar: CompiledGrammar | None


Events = list[tuple[RequestId, EngineEvent]]


class LLMEngine:
    def __init__(self, lm: LanguageModel, config: EngineConfig) -> None:
        self.lm = lm
        self.config = config
        self.kv_bytes_per_token = kv_bytes_per_token(lm)
        bytes_per_block = self.kv_bytes_per_token * config.block_size
        num_blocks = config.kv_cache_memory_bytes // bytes_per_block
        if num_blocks < 1:
            raise ValueError(
                f"KV cache memory {config.kv_cache_memory_bytes} bytes is less than one "
                f"block ({bytes_per_block} bytes)"
            )
        self.max_model_len = min(lm.config.max_position, config.max_model_len or 1 << 62)
        self.pool = BlockPool(num_blocks)
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_num_seqs=config.max_num_seqs,
                max_num_batched_tokens=config.max_num_batched_tokens,
                block_size=config.block_size,
                enable_prefix_caching=config.enable_prefix_caching,
                cache_salt=lm.name,
                batch_aging_s=config.batch_aging_s,
                sliding_window=lm.config.every_layer_window,
            ),
            self.pool,
        )
        self.runner = ModelRunner(
            lm, num_blocks, config.block_size, config.native_attention, config.threads
        )
        self.grammars = GrammarCompiler(
            lm.tokenizer, lm.config.vocab_size, config.grammar_cache_size
        )
        self._seqs: dict[RequestId, Sequence] = {}
        self._outputs: dict[RequestId, _Output] = {}
        self._waiting_choices: dict[RequestId, _Waiting] = {}
        self._num_steps = 0
        self._last_step: StepStats | None = None

    @property
    def kv_capacity_tokens(self) -> int:
        return self.pool.num_blocks * self.config.block_size

    @property
    def context_tokens(self) -> int:
        """The most prompt + output tokens one request may hold."""
        return min(self.max_model_len, self.kv_capacity_tokens)

    def check_request(self, request: GenerationRequest) -> None:
        """Raise RequestRejected for a request this engine could never serve (GrammarError
        for a constraint that cannot compile). Reads only sizes fixed at start-up and the
        thread-safe grammar cache, so it is safe to call from any thread; a constraint not
        cached yet is compiled here (about a millisecond for a JSON schema)."""
        self._check(request)

    def _check(self, request: GenerationRequest) -> CompiledGrammar | None:
        params = request.params
        fit_request(len(request.prompt_ids), params.max_tokens, ContextLimit(self.context_tokens))
        vocab = self.lm.config.vocab_size
        if bad := [t for t, _ in params.logit_bias if not 0 <= t < vocab]:
            raise RequestRejected(
                f"logit_bias names token ids outside this model's vocabulary of {vocab}: {bad[:5]}",
                "logit_bias",
            )
        return None if params.constraint is None else self.grammars.compile(params.constraint)

    def add_request(self, request: GenerationRequest) -> None:
        # Compiled before the scheduler sees it: a bad constraint never takes a slot.
        grammar = self._check(request)
        rid = request.request_id
        choices = [_choice(request, i) for i in range(1, request.params.n)]
        if any(r.request_id in self._seqs for r in [request, *choices]):
            raise RequestRejected(f"request id {rid!r} is already running", "prompt")
        self._start(request, rid, 0, grammar)
        if choices:
            self._waiting_choices[rid] = _Waiting(choices, grammar)

    def _start(
        self,
        request: GenerationRequest,
        parent: RequestId,
        index: int,
        grammar: CompiledGrammar | None,
    ) -> None:
        seq = Sequence(request, arrival_index=0, fork_of=self._seqs[parent] if index else None)
        self._seqs[request.request_id] = seq
        detok = IncrementalDetokenizer(self.lm.tokenizer, request.params.stop)
        self._outputs[request.request_id] = _Output(detok, parent, index)
        self.runner.add_request(request.request_id, request.params.seed, grammar)
        # A later choice goes ahead of the queue: its request was admitted already, and
        # its prompt's blocks are fresh in the prefix cache.
        self.scheduler.add(seq, front=index > 0)

    def abort_request(self, request_id: RequestId) -> Events:
        """Every choice of the request still in the engine ends as aborted."""
        now = time.monotonic()
        seqs = [s for s in self._seqs.values() if self._outputs[s.request_id].parent == request_id]
        return [e for s in seqs for e in self._finish(s, FinishReason.ABORT, "", now)]

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def reset(self) -> None:
        """Back to the state of a new engine: an empty KV cache (no cached prefixes),
        counters at zero. Only with nothing running or waiting (after a calibration)."""
        assert not self._seqs, f"reset with {len(self._seqs)} requests in the engine"
        self.pool = BlockPool(self.pool.num_blocks)
        self.scheduler = Scheduler(self.scheduler.config, self.pool)
        self._num_steps = 0
        self._last_step = None

    def step(self) -> Events:
        t0 = time.perf_counter()
        now = time.monotonic()
        plan = self.scheduler.schedule(now)
        expired = [e for s in plan.expired for e in self._finish(s, FinishReason.TIMEOUT, "", now)]
        if plan.is_empty:
            return expired
        t1 = time.perf_counter()
        # Prompts that get their first token this step (read before the update moves on).
        prompt_tokens_done = sum(
            item.seq.num_prompt_tokens
            for item in plan.scheduled
            if item.samples and not item.seq.output_ids
        )
        prefill_pairs = sum(
            prefill_pairs_of(item.seq.num_computed_tokens, item.num_new_tokens)
            for item in plan.scheduled
            if item.num_new_tokens > 1
        )
        # Which sequences are still before their first token (read before the update).
        in_prefill = [not item.seq.output_ids for item in plan.scheduled]
        for item in plan.scheduled:
            if item.seq.request.clock.scheduled_ts is None:
                item.seq.request.clock.scheduled_ts = now
        try:
            self.runner.copy_tokens(plan.copies)
            result = self.runner.execute(plan)
        except Exception as exc:  # a failed forward must not take the engine down
            log.exception("engine step failed")
            return expired + self._fail(plan, f"engine step failed: {exc}")
        finally:
            self.scheduler.release_copies(plan)
        self.scheduler.update(plan, result.sampled)
        t2 = time.perf_counter()
        num_step_tokens = plan.num_tokens
        for item, prefill in zip(plan.scheduled, in_prefill, strict=True):
            item.seq.step_times.charge(t2 - t0, item.num_new_tokens, num_step_tokens, prefill)
        events = expired + self._process_outputs(result)
        t3 = time.perf_counter()
        self._num_steps += 1
        self._last_step = StepStats(
            num_seqs=len(plan.scheduled),
            num_tokens=plan.num_tokens,
            num_decodes=sum(1 for s in plan.scheduled if s.num_new_tokens == 1),
            schedule_s=t1 - t0,
            prepare_s=result.prepare_s,
            forward_s=result.forward_s,
            sample_s=result.sample_s,
            output_s=t3 - t2,
            num_prompt_tokens_done=prompt_tokens_done,
            num_prefill_pairs=prefill_pairs,
        )
        return events

    def _process_outputs(self, result: StepResult) -> Events:
        events: Events = []
        now = time.monotonic()
        eos = self.lm.tokenizer.eos_token_ids
        for rid, token in result.sampled.items():
            seq = self._seqs[rid]
            params = seq.request.params
            clock = seq.request.clock
            if clock.first_token_ts is None:
                clock.first_token_ts = now
            clock.last_token_ts = now
            out = self._outputs[rid]
            detok = out.detok
            prompt_lps: tuple[SampledLogprobs, ...] = ()
            if len(seq.output_ids) == 1:  # its first token: the prompt is in the cache
                if params.prompt_logprobs is not None:
                    prompt_lps = tuple(self.runner.take_prompt_logprobs(rid))
                waiting = self._waiting_choices.pop(rid, None)
                for i, request in enumerate(waiting.requests if waiting else (), start=1):
                    self._start(request, rid, i, waiting.grammar if waiting else None)
            reason: FinishReason | None = None
            if token in eos and not params.ignore_eos:
                piece, reason = "", FinishReason.STOP
            else:
                piece = detok.push(token)
                if detok.stopped:
                    reason = FinishReason.STOP
            if reason is None and rid in result.grammar_done:
                reason = FinishReason.STOP
            if reason is None and (
                len(seq.output_ids) >= params.max_tokens or seq.num_tokens >= self.max_model_len
            ):
                reason = FinishReason.LENGTH
            lp = result.logprobs.get(rid)
            logprobs = () if lp is None else (lp,)
            event = TokenEvent(piece, (token,), now, logprobs, out.index, prompt_lps)
            events.append((out.parent, event))
            if reason is not None:
                events.extend(self._finish(seq, reason, detok.finish(), now))
        return events

    def _finish(
        self, seq: Sequence, reason: FinishReason, text: str, now: float, error: str | None = None
    ) -> Events:
        """The sequence's FinishEvent, and those of the choices still waiting for it."""
        rid = seq.request_id
        self.scheduler.finish(seq)
        self.runner.remove_request(rid)
        del self._seqs[rid]
        out = self._outputs.pop(rid)
        clock = seq.request.clock
        clock.finished_ts = now
        events: Events = [
            (
                out.parent,
                FinishEvent(
                    reason,
                    text,
                    seq.num_prompt_tokens,
                    len(seq.output_ids),
                    clock,
                    error,
                    seq.num_cached_prompt_tokens,
                    seq.num_prefill_chunks,
                    out.index,
                    seq.step_times,
                ),
            )
        ]
        waiting = self._waiting_choices.pop(rid, None)  # choice 0 ended before a token
        for i, request in enumerate(waiting.requests if waiting else (), start=1):
            ended = FinishEvent(reason, "", len(request.prompt_ids), 0, clock, error, index=i)
            events.append((rid, ended))
        return events

    def _fail(self, plan: StepPlan, message: str) -> Events:
        now = time.monotonic()
        return [
            e
            for item in plan.scheduled
            for e in self._finish(item.seq, FinishReason.ERROR, "", now, message)
        ]

    def stats(self) -> EngineStats:
        waiting = self.scheduler.waiting
        return EngineStats(
            num_waiting_interactive=len(waiting[Priority.INTERACTIVE]),
            num_waiting_batch=len(waiting[Priority.BATCH]),
            num_running=len(self.scheduler.running),
            num_kv_blocks_total=self.pool.num_blocks,
            num_kv_blocks_used=self.pool.num_used,
            num_kv_blocks_cached=self.pool.num_cached,
            num_preemptions=self.scheduler.num_preemptions,
            num_prefix_queried_tokens=self.scheduler.num_prefix_queried_tokens,
            num_prefix_hit_tokens=self.scheduler.num_prefix_hit_tokens,
            num_steps=self._num_steps,
            last_step=self._last_step,
        )


def _choice(request: GenerationRequest, index: int) -> GenerationRequest:
    """Choice `index` (1 or more) of a request: its own id and seed, the request's clock."""
    params = request.params
    seed = None if params.seed is None else params.seed + index
    return GenerationRequest(
        RequestId(f"{request.request_id}/{index}"),
        request.prompt_ids,
        dataclasses.replace(params, n=1, seed=seed, prompt_logprobs=None),
        request.priority,
        request.clock,
        request.deadline_ts,
    )
