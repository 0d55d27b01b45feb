"""An engine's self-profile: the steps it measures, and an engine left as new."""

from __future__ import annotations

import time

from fakes import tiny_language_model

from vigil.engine.calibrate import DECODE_STEPS, PROBE_TOKENS, PROMPT_LENGTHS, calibrate
from vigil.engine.llm_engine import EngineConfig, LLMEngine
from vigil.engine.request import (
    FinishEvent,
    GenerationRequest,
    RequestClock,
    RequestId,
    SamplingParams,
)
from vigil.engine.runner import kv_bytes_per_token


def engine(smollm2_tokenizer, max_num_seqs: int, budget: int = 512) -> LLMEngine:  # type: ignore[no-untyped-def]
    lm = tiny_language_model(smollm2_tokenizer)
    config = EngineConfig(
        block_size=16,
        kv_cache_memory_bytes=kv_bytes_per_token(lm) * 16 * 256,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        native_attention=False,
    )
    return LLMEngine(lm, config)


def test_prompts_alone_then_a_staircase_of_batches_then_a_probe(smollm2_tokenizer) -> None:  # type: ignore[no-untyped-def]
    steps = calibrate(engine(smollm2_tokenizer, max_num_seqs=6))
    shapes = [(s.num_seqs, s.num_tokens) for s in steps]

    def decode(n: int) -> list[tuple[int, int]]:
        return [(n, n)] * DECODE_STEPS

    assert shapes == [
        *[(1, n) for n in PROMPT_LENGTHS],  # each the faster of two runs
        (1, 4), *decode(1),  # the first prompt of the staircase, then its decodes
        (2, 5), *decode(2),  # one decode beside a newcomer's 4 prompt tokens
        (4, 10), *decode(4),
        (6, 12), *decode(6),  # max_num_seqs
        (6, 5 + PROBE_TOKENS),  # a probe prompt beside the batch less one
    ]  # fmt: skip
    assert all(s.num_prefill_pairs > 0 for s in steps if s.num_tokens > s.num_seqs)


def test_the_engine_is_left_as_new(smollm2_tokenizer) -> None:  # type: ignore[no-untyped-def]
    core = engine(smollm2_tokenizer, max_num_seqs=4)
    calibrate(core)
    stats = core.stats()
    assert (stats.num_steps, stats.num_running, stats.num_waiting) == (0, 0, 0)
    assert stats.num_kv_blocks_used == 0 and stats.num_kv_blocks_cached == 0
    assert stats.num_prefix_queried_tokens == 0 and stats.last_step is None
    ids = smollm2_tokenizer.encode("Hello there")
    request = GenerationRequest(
        RequestId("after"), ids, SamplingParams(max_tokens=3), clock=RequestClock(time.monotonic())
    )
    core.add_request(request)
    events = []
    while core.has_work():
        events += core.step()
    finish = events[-1][1]
    assert isinstance(finish, FinishEvent) and finish.num_output_tokens == 3


def test_a_small_token_budget_stops_the_staircase_where_prompts_no_longer_fit(
    smollm2_tokenizer,  # type: ignore[no-untyped-def]
) -> None:
    # 32 slots but a budget of 64 tokens: growing 16 -> 32 would take 16 decodes and 16
    # prompts of 4 tokens, 80 in one step.
    steps = calibrate(engine(smollm2_tokenizer, max_num_seqs=32, budget=64))
    decode = sorted({s.num_seqs for s in steps if s.num_tokens == s.num_seqs})
    assert decode == [1, 2, 4, 8, 16]
    assert max(s.num_tokens for s in steps) <= 64  # the prompts and the probe capped too
