"""The engine loop on the bundled SmolLM2: batching, chunking and preemption change no
greedy output; every request ends with the right reason and gives its blocks back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
import torch

from vigil.engine import async_engine
from vigil.engine.async_engine import AsyncLLMEngine
from vigil.engine.limits import RequestRejected
from vigil.engine.llm_engine import EngineConfig, LLMEngine
from vigil.engine.loaders.llm import LanguageModel
from vigil.engine.request import (
    FinishEvent,
    FinishReason,
    GenerationRequest,
    RequestClock,
    RequestId,
    SamplingParams,
    TokenEvent,
)
from vigil.engine.runner import kv_bytes_per_token
from vigil.engine.tokenizer import ChatMessage

pytestmark = pytest.mark.slow

# Batch shape changes the order of float operations, hence the last bits of the logits
# (observed: under 7e-5). A flipped greedy choice is only accepted at a near-tie.
BATCH_ATOL = 5e-4

PASSAGE = (
    "The lighthouse stood on a rock at the mouth of the bay. Every night for forty years "
    "the keeper climbed its one hundred and twelve steps, trimmed the wick, wound the clock "
    "that turned the lens, and wrote the weather in a leather book. Ships passed, storms "
    "came and went, and the light never failed. When the keeper grew old, his daughter took "
    "the keys, and she kept the book in the same careful hand."
)
# (prompt, is it a chat message, max_tokens): mixed prompt lengths (one longer than a
# step's token budget, so it is prefilled in chunks) and mixed output lengths.
PROMPTS = [
    ("What is the capital of France?", True, 6),
    ("Write a haiku about the sea.", True, 10),
    ("List three colours.", True, 8),
    ("Explain gravity to a child in one sentence.", True, 12),
    ("Once upon a time", False, 5),
    ("How many legs does a spider have?", True, 4),
    (f"Summarise this story in one sentence: {PASSAGE}", True, 9),
    ("The capital of Italy is", False, 7),
    # The same long passage again with other questions: with the prefix cache on, these
    # share its leading blocks with the one above.
    (f"Summarise this story in one sentence: {PASSAGE} Who took the keys?", True, 6),
    (f"Summarise this story in one sentence: {PASSAGE} How many steps?", True, 5),
    ("Name a planet.", True, 3),
    ("What colour is the sky?", True, 11),
    ("Translate 'good morning' into French.", True, 7),
    ("1, 2, 3, 4,", False, 8),
    ("Give me a word that rhymes with cat.", True, 4),
    ("Why do birds fly south?", True, 12),
]


def make_engine(
    lm: LanguageModel,
    num_blocks: int = 64,
    block_size: int = 16,
    prefix_cache: bool = False,
    **overrides: int,
) -> LLMEngine:
    memory = kv_bytes_per_token(lm) * block_size * num_blocks
    config = {"max_num_seqs": 16, "max_num_batched_tokens": 64, **overrides}
    return LLMEngine(
        lm,
        EngineConfig(
            block_size=block_size,
            kv_cache_memory_bytes=memory,
            enable_prefix_caching=prefix_cache,
            **config,
        ),
    )


def chat_ids(lm: LanguageModel, question: str) -> list[int]:
    return lm.tokenizer.encode(lm.tokenizer.render_chat([ChatMessage("user", question)]))


def greedy(max_tokens: int, **kwargs: object) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, **kwargs)  # type: ignore[arg-type]


@dataclass
class Outcome:
    tokens: list[int] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)  # (V,) per sampled token
    text: str = ""
    finish: FinishEvent | None = None

    def add(self, event: TokenEvent | FinishEvent) -> None:
        assert self.finish is None, "event after the finish"
        self.text += event.text
        if isinstance(event, TokenEvent):
            self.tokens.extend(event.token_ids)
        else:
            self.finish = event


@contextmanager
def recording_logits(engine: LLMEngine, outcomes: dict[RequestId, Outcome]) -> Iterator[None]:
    """Files each sampled logits row under its request: the runner computes logits for the
    sampling rows in the order of StepResult.sampled."""
    rows: list[torch.Tensor] = []
    handle = engine.lm.model.lm_head.register_forward_hook(lambda m, a, out: rows.append(out))
    execute = engine.runner.execute

    def execute_and_file(plan):  # type: ignore[no-untyped-def]
        result = execute(plan)
        logits = rows.pop()
        assert logits.shape[0] == len(result.sampled)
        for rid, row in zip(result.sampled, logits, strict=True):
            outcomes[rid].logits.append(row)
        return result

    engine.runner.execute = execute_and_file  # type: ignore[method-assign]
    try:
        yield
    finally:
        handle.remove()
        engine.runner.execute = execute  # type: ignore[method-assign]


def run(engine: LLMEngine, batch: list[GenerationRequest]) -> dict[RequestId, Outcome]:
    """Submit all, step until the engine is idle; check that every block came back."""
    outcomes = {r.request_id: Outcome() for r in batch}
    with recording_logits(engine, outcomes):
        for request in batch:
            engine.add_request(request)
        while engine.has_work():
            for rid, event in engine.step():
                outcomes[rid].add(event)
    assert all(out.finish is not None for out in outcomes.values())
    assert engine.pool.num_free == engine.pool.num_blocks
    assert engine.stats().num_kv_blocks_used == 0 and engine.stats().num_running == 0
    return outcomes


def requests(lm: LanguageModel) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            RequestId(f"r{i}"),
            chat_ids(lm, prompt) if chat else lm.tokenizer.encode(prompt),
            greedy(max_tokens),
        )
        for i, (prompt, chat, max_tokens) in enumerate(PROMPTS)
    ]


@pytest.fixture(scope="module")
def alone(smollm2: LanguageModel) -> dict[RequestId, Outcome]:
    """Each request run on its own: the reference for every batched run."""
    engine = make_engine(smollm2)
    outcomes: dict[RequestId, Outcome] = {}
    for request in requests(smollm2):
        outcomes |= run(engine, [request])
    return outcomes


def assert_same_as_alone(
    batched: dict[RequestId, Outcome], alone: dict[RequestId, Outcome], assert_agree: Callable
) -> None:
    assert batched.keys() == alone.keys()
    for rid, out in batched.items():
        ref = alone[rid]
        parted = assert_agree(ref.tokens, ref.logits, out.tokens, out.logits, atol=BATCH_ATOL)
        if parted is None:
            assert out.text == ref.text
            assert out.finish is not None and ref.finish is not None
            assert out.finish.reason == ref.finish.reason


def test_prompts_are_mixed_and_one_needs_chunked_prefill(smollm2: LanguageModel) -> None:
    lengths = sorted(len(r.prompt_ids) for r in requests(smollm2))
    assert lengths[0] < 10 and lengths[-1] > 64  # 64: the token budget per step
    assert len({max_tokens for _, _, max_tokens in PROMPTS}) >= 6


@pytest.mark.parametrize("prefix_cache", [False, True], ids=["no-prefix-cache", "prefix-cache"])
def test_concurrent_greedy_outputs_equal_each_run_alone(
    smollm2: LanguageModel,
    alone: dict[RequestId, Outcome],
    assert_greedy_runs_agree,
    prefix_cache: bool,
) -> None:
    # Without the cache, a budget that admits all sixteen at once (chunked prefill is
    # covered by the preemption test). With it, a smaller budget spreads admission over
    # steps, so later prompts find the blocks earlier ones computed (shared system
    # prompt, shared passage) instead of all computing them in the same step.
    budget = 128 if prefix_cache else 1024
    engine = make_engine(smollm2, prefix_cache=prefix_cache, max_num_batched_tokens=budget)
    seqs_per_step: list[int] = []
    prompts_done: list[int] = []
    step = engine.step

    def counting_step():  # type: ignore[no-untyped-def]
        events = step()
        last = engine.stats().last_step
        seqs_per_step.append(last.num_seqs)  # type: ignore[union-attr]
        prompts_done.append(last.num_prompt_tokens_done)  # type: ignore[union-attr]
        return events

    engine.step = counting_step  # type: ignore[method-assign]
    copied: list[int] = []  # tokens of each partial prefix hit
    copy_tokens = engine.runner.copy_tokens

    def counting_copies(copies):  # type: ignore[no-untyped-def]
        copied.extend(c.num_tokens for c in copies)
        copy_tokens(copies)

    engine.runner.copy_tokens = counting_copies  # type: ignore[method-assign]
    batched = run(engine, requests(smollm2))
    assert engine.stats().num_preemptions == 0
    # Each prompt counted once, in the step that gave its first token (the prefill rate).
    assert sum(prompts_done) == sum(len(r.prompt_ids) for r in requests(smollm2))
    hits = engine.stats().num_prefix_hit_tokens
    finishes = [o.finish for o in batched.values() if o.finish is not None]
    assert len(finishes) == len(PROMPTS) and all(f.num_prefill_chunks >= 1 for f in finishes)
    assert sum(f.num_cached_prompt_tokens for f in finishes) == hits  # as each trace says
    if prefix_cache:
        assert hits >= 3 * 16  # at least the passage's blocks, reused by the two followers
        assert max(seqs_per_step) >= 8
        # The chat template's leading tokens end inside a block: copied, not recomputed.
        assert len(copied) >= 4 and all(0 < n < 16 for n in copied)
    else:
        assert hits == 0 and copied == []
        assert max(seqs_per_step) == len(PROMPTS)  # all sixteen really shared a batch
    assert_same_as_alone(batched, alone, assert_greedy_runs_agree)


@pytest.mark.parametrize("prefix_cache", [False, True], ids=["no-prefix-cache", "prefix-cache"])
def test_outputs_survive_preemption(
    smollm2: LanguageModel,
    alone: dict[RequestId, Outcome],
    assert_greedy_runs_agree,
    prefix_cache: bool,
) -> None:
    # 40 blocks of 4 tokens: the longest request (about 150 tokens) fits alone, all sixteen
    # together do not; small blocks make decoding sequences ask for blocks often.
    engine = make_engine(smollm2, num_blocks=40, block_size=4, prefix_cache=prefix_cache)
    outputs_when_preempted: list[int] = []
    schedule = engine.scheduler.schedule

    def recording_schedule(now_ts: float):  # type: ignore[no-untyped-def]
        plan = schedule(now_ts)
        outputs_when_preempted.extend(len(seq.output_ids) for seq in plan.preempted)
        return plan

    engine.scheduler.schedule = recording_schedule  # type: ignore[method-assign]
    batched = run(engine, requests(smollm2))
    assert engine.stats().num_preemptions == len(outputs_when_preempted) > 0
    # At least one had generated tokens, which its recompute had to feed back in.
    assert max(outputs_when_preempted) > 0
    # The longest prompt is over the 64-token step budget: it is prefilled in chunks.
    chunks = [o.finish.num_prefill_chunks for o in batched.values() if o.finish is not None]
    assert max(chunks) >= 2
    assert_same_as_alone(batched, alone, assert_greedy_runs_agree)


def test_finish_reasons_for_eos_max_tokens_and_stop_string(smollm2: LanguageModel) -> None:
    # Greedy here is far from any near-tie (the closest two logits over these tokens are
    # 0.08 apart, rounding moves them by under 1e-4), so the text is exact.
    prompt = chat_ids(smollm2, "What is the capital of France?")
    eos = 2  # <|im_end|>
    engine = make_engine(smollm2)
    out = run(
        engine,
        [
            GenerationRequest(RequestId("eos"), prompt, greedy(20)),
            GenerationRequest(RequestId("length"), prompt, greedy(3)),
            GenerationRequest(RequestId("ignore-eos"), prompt, greedy(10, ignore_eos=True)),
            GenerationRequest(RequestId("stop"), prompt, greedy(20, stop=("Paris", "France"))),
        ],
    )
    finish = {rid: o.finish for rid, o in out.items()}
    assert finish["eos"].reason is FinishReason.STOP
    assert out["eos"].text == "The capital of France is Paris."
    assert out["eos"].tokens[-1] == eos and finish["eos"].num_output_tokens == 8
    assert finish["eos"].num_prompt_tokens == len(prompt)

    assert finish["length"].reason is FinishReason.LENGTH
    assert out["length"].tokens == out["eos"].tokens[:3]
    assert finish["length"].num_output_tokens == 3

    assert finish["ignore-eos"].reason is FinishReason.LENGTH
    assert out["ignore-eos"].tokens[:8] == out["eos"].tokens  # went on past the EOS
    assert len(out["ignore-eos"].tokens) == 10

    assert finish["stop"].reason is FinishReason.STOP
    assert out["stop"].text == "The capital of "  # 'France' comes before 'Paris'
    clock = finish["eos"].clock
    assert clock.arrival_ts <= clock.scheduled_ts <= clock.first_token_ts  # type: ignore[operator]
    assert clock.first_token_ts <= clock.last_token_ts <= clock.finished_ts  # type: ignore[operator]


def test_abort_frees_the_blocks_of_running_and_waiting_requests(smollm2: LanguageModel) -> None:
    engine = make_engine(smollm2, max_num_seqs=1)
    prompt = chat_ids(smollm2, "Write a haiku about the sea.")
    engine.add_request(GenerationRequest(RequestId("running"), prompt, greedy(50)))
    engine.add_request(GenerationRequest(RequestId("waiting"), prompt, greedy(50)))
    for _ in range(3):
        engine.step()
    used = engine.pool.num_used
    assert used == 3  # 38 prompt tokens and 2 decoded ones cached: three 16-token blocks

    [(rid, event)] = engine.abort_request(RequestId("waiting"))
    assert isinstance(event, FinishEvent) and event.reason is FinishReason.ABORT
    assert (rid, event.num_output_tokens, engine.pool.num_used) == ("waiting", 0, used)

    [(rid, event)] = engine.abort_request(RequestId("running"))
    assert isinstance(event, FinishEvent) and event.reason is FinishReason.ABORT
    assert event.num_output_tokens == 3
    assert engine.pool.num_free == engine.pool.num_blocks
    assert not engine.has_work() and engine.step() == []
    assert engine.abort_request(RequestId("running")) == []  # already gone: nothing to do


def test_failed_step_ends_its_requests_with_error_and_frees_their_blocks(
    smollm2: LanguageModel,
) -> None:
    engine = make_engine(smollm2, max_num_seqs=1)
    prompt = chat_ids(smollm2, "List three colours.")
    engine.add_request(GenerationRequest(RequestId("a"), prompt, greedy(10)))
    engine.add_request(GenerationRequest(RequestId("b"), prompt, greedy(2)))
    engine.step()
    execute = engine.runner.execute

    def broken(plan):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")

    engine.runner.execute = broken  # type: ignore[method-assign]
    [(rid, event)] = engine.step()  # only a was scheduled; b waits behind max_num_seqs
    assert isinstance(event, FinishEvent) and event.reason is FinishReason.ERROR
    assert (rid, event.error) == ("a", "engine step failed: boom")
    assert engine.pool.num_used == 0
    engine.runner.execute = execute  # type: ignore[method-assign]
    # The engine carries on with the requests the failed step did not hold.
    finishes = [e for _ in range(3) for _, e in engine.step() if isinstance(e, FinishEvent)]
    assert [(f.reason, f.num_output_tokens) for f in finishes] == [(FinishReason.LENGTH, 2)]
    assert engine.pool.num_free == engine.pool.num_blocks and not engine.has_work()


def test_request_larger_than_the_context_is_rejected(smollm2: LanguageModel) -> None:
    engine = make_engine(smollm2, num_blocks=8, max_model_len=100)
    assert engine.max_model_len == 100  # lower than the model's 8192
    with pytest.raises(RequestRejected, match="context window 100 tokens"):
        engine.add_request(GenerationRequest(RequestId("a"), [1] * 90, greedy(11)))
    engine.check_request(GenerationRequest(RequestId("a"), [1] * 90, greedy(10)))  # fits

    engine = make_engine(smollm2, num_blocks=4)  # 64 tokens of KV cache
    assert engine.max_model_len == smollm2.config.max_position == 8192
    with pytest.raises(RequestRejected, match="context window 64 tokens"):
        engine.check_request(GenerationRequest(RequestId("b"), [1] * 60, greedy(5)))
    with pytest.raises(RequestRejected, match="empty"):
        engine.add_request(GenerationRequest(RequestId("c"), [], greedy(5)))
    assert not engine.has_work()


def test_duplicate_request_id_is_rejected(smollm2: LanguageModel) -> None:
    engine = make_engine(smollm2, num_blocks=4)
    engine.add_request(GenerationRequest(RequestId("a"), [1, 2, 3], greedy(2)))
    with pytest.raises(RequestRejected, match="already running"):
        engine.add_request(GenerationRequest(RequestId("a"), [1, 2, 3], greedy(2)))


async def _consume(engine: AsyncLLMEngine, request: GenerationRequest, out: Outcome) -> None:
    async for event in engine.generate(request):
        out.add(event)


async def test_async_engine_streams_the_same_greedy_tokens_and_aborts_a_leaver(
    smollm2: LanguageModel, alone: dict[RequestId, Outcome], assert_greedy_runs_agree
) -> None:
    core = make_engine(smollm2)
    engine = AsyncLLMEngine(core)
    batch = requests(smollm2)[:3]
    leaver_params = greedy(50, ignore_eos=True)  # still running when it leaves
    leaver = GenerationRequest(RequestId("leaver"), batch[0].prompt_ids, leaver_params)
    after = requests(smollm2)[4]
    outcomes = {r.request_id: Outcome() for r in [*batch, leaver, after]}
    with recording_logits(core, outcomes):
        engine.start()
        try:
            await asyncio.gather(*(_consume(engine, r, outcomes[r.request_id]) for r in batch))
            stream = engine.generate(leaver)
            assert isinstance(await anext(stream), TokenEvent)
            await stream.aclose()  # the client went away: the request is aborted
            # Commands are applied in order, so once this one is done the abort was too.
            await _consume(engine, after, outcomes[after.request_id])
            empty = GenerationRequest(RequestId("x"), [], greedy(1))
            with pytest.raises(RequestRejected):
                engine.check_request(empty)
            rejected = await anext(engine.generate(empty))
            assert isinstance(rejected, FinishEvent) and rejected.reason is FinishReason.ERROR
            assert rejected.error is not None and "empty" in rejected.error
        finally:
            engine.stop()
    assert core.pool.num_free == core.pool.num_blocks and not core.has_work()
    assert outcomes[leaver.request_id].finish is None  # it never saw its abort event
    assert engine.stats().num_running == 0
    done = {rid: outcomes[rid] for rid in (*(r.request_id for r in batch), after.request_id)}
    assert_same_as_alone(done, {rid: alone[rid] for rid in done}, assert_greedy_runs_agree)


@pytest.mark.parametrize("busy_s", [0.0, 3600.0], ids=["every-step", "idle-only"])
async def test_the_engine_thread_trims_the_heap_after_steps_not_while_idle(
    smollm2: LanguageModel, monkeypatch: pytest.MonkeyPatch, busy_s: float
) -> None:
    monkeypatch.setattr(async_engine, "TRIM_IDLE_S", 0.0)
    monkeypatch.setattr(async_engine, "TRIM_BUSY_S", busy_s)
    trims: list[int] = []  # the engine's step count at each trim
    core = make_engine(smollm2)
    engine = AsyncLLMEngine(core, trim=lambda: trims.append(core.stats().num_steps))
    engine.start()
    try:
        await asyncio.sleep(0.6)  # the idle loop has woken: nothing stepped, nothing trimmed
        assert trims == []
        request = GenerationRequest(RequestId("t"), [1, 2, 3], greedy(8, ignore_eos=True))
        async for _ in engine.generate(request):
            pass
        for _ in range(100):
            if trims and trims[-1] == core.stats().num_steps:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.6)  # idle again: no steps since, so no trim either
    finally:
        engine.stop()
    steps = core.stats().num_steps
    # Busy: after every step (the limit is 0 s); else only once idle, after the last.
    assert trims == (list(range(1, steps + 1)) if busy_s == 0 else [steps])


def test_request_past_its_queue_deadline_times_out_and_never_starts(
    smollm2: LanguageModel,
) -> None:
    engine = make_engine(smollm2, max_num_seqs=1)
    prompt = chat_ids(smollm2, "Write a haiku about the sea.")
    now = time.monotonic()
    engine.add_request(GenerationRequest(RequestId("first"), prompt, greedy(4)))
    late = GenerationRequest(
        RequestId("late"), prompt, greedy(4), deadline_ts=now + 0.05, clock=RequestClock(now)
    )
    engine.add_request(late)
    engine.step()  # only "first" fits (max_num_seqs=1); "late" waits
    time.sleep(0.06)
    events = engine.step()
    [(rid, event)] = [(r, e) for r, e in events if isinstance(e, FinishEvent)]
    assert rid == "late" and event.reason is FinishReason.TIMEOUT
    assert event.num_output_tokens == 0 and event.clock.scheduled_ts is None
    while engine.has_work():
        engine.step()
    assert engine.pool.num_free == engine.pool.num_blocks


def test_step_time_is_split_between_a_requests_own_tokens_and_the_rest_of_the_batch(
    smollm2: LanguageModel,
) -> None:
    """Alone, a request's steps are all its own; in a batch, each step's time is split by
    tokens, so the shares of one step add up to it and a short prompt prefilled beside a
    long one shows most of its prefill as the long one's."""
    solo = run(make_engine(smollm2), [requests(smollm2)[0]])
    [(_, only)] = solo.items()
    assert only.finish is not None and only.finish.step_times is not None
    t = only.finish.step_times
    assert t.prefill_own_s > 0 and t.decode_own_s > 0
    assert t.prefill_shared_s == pytest.approx(0, abs=1e-9)
    assert t.decode_shared_s == pytest.approx(0, abs=1e-9)

    engine = make_engine(smollm2, max_num_batched_tokens=256)
    step_s: list[float] = []
    step = engine.step

    def timed_step():  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        events = step()
        step_s.append(time.perf_counter() - t0)
        return events

    engine.step = timed_step  # type: ignore[method-assign]
    batch = [requests(smollm2)[i] for i in (0, 6)]  # a short question, the long passage
    short, long_ = (o.finish for o in run(engine, batch).values())
    assert short is not None and long_ is not None
    a, b = short.step_times, long_.step_times
    assert a is not None and b is not None
    # Both prompts were prefilled in the first step, together.
    assert short.num_prefill_chunks == long_.num_prefill_chunks == 1
    first = a.prefill_own_s + a.prefill_shared_s
    assert first == pytest.approx(b.prefill_own_s + b.prefill_shared_s)
    assert a.prefill_own_s + b.prefill_own_s == pytest.approx(first)
    assert first <= step_s[0]
    num_short, num_long = len(batch[0].prompt_ids), len(batch[1].prompt_ids)
    assert a.prefill_own_s / first == pytest.approx(num_short / (num_short + num_long))
    assert a.prefill_shared_s > a.prefill_own_s  # mostly the passage's time
    clock = short.clock
    assert clock.first_token_ts is not None and clock.scheduled_ts is not None
    assert first <= clock.first_token_ts - clock.scheduled_ts + 1e-3
    total = sum(
        x.prefill_own_s + x.decode_own_s for x in (a, b)
    )  # every step's time is someone's own
    assert 0.8 * sum(step_s) <= total <= sum(step_s)  # the rest: turning tokens into text
