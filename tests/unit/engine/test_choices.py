"""n choices of one prompt and prompt logprobs, through the real engine on the bundled
SmolLM2: the choices draw as separate seeded requests would, the prompt is prefilled
once, and the prompt's logprobs are the model's own."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from vigil.engine.async_engine import AsyncLLMEngine
from vigil.engine.llm_engine import LLMEngine
from vigil.engine.loaders.llm import LanguageModel
from vigil.engine.request import (
    EngineEvent,
    FinishEvent,
    FinishReason,
    GenerationRequest,
    RequestClock,
    RequestId,
    SamplingParams,
    TokenEvent,
)

from .test_llm_engine import Outcome, chat_ids, make_engine, recording_logits, run

pytestmark = pytest.mark.slow

QUESTION = "Write a haiku about the sea."


def run_choices(engine: LLMEngine, request: GenerationRequest) -> dict[int, list[EngineEvent]]:
    """Step until idle; the request's events by choice, every block given back."""
    by_choice: dict[int, list[EngineEvent]] = defaultdict(list)
    engine.add_request(request)
    while engine.has_work():
        for rid, event in engine.step():
            assert rid == request.request_id
            by_choice[event.index].append(event)
    assert engine.pool.num_free == engine.pool.num_blocks
    return by_choice


def tokens(events: list[EngineEvent]) -> list[int]:
    return [t for e in events if isinstance(e, TokenEvent) for t in e.token_ids]


def finish(events: list[EngineEvent]) -> FinishEvent:
    *_, last = events
    assert isinstance(last, FinishEvent) and sum(isinstance(e, FinishEvent) for e in events) == 1
    return last


def test_choices_draw_as_separately_seeded_requests_from_one_prefill(
    smollm2: LanguageModel,
) -> None:
    prompt = chat_ids(smollm2, QUESTION)
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=40, n=3)
    engine = make_engine(smollm2, num_blocks=128, prefix_cache=True)
    by_choice = run_choices(engine, GenerationRequest(RequestId("c"), prompt, params))
    assert sorted(by_choice) == [0, 1, 2]
    alone = [
        run(
            make_engine(smollm2, num_blocks=128),
            [GenerationRequest(RequestId("a"), prompt, SamplingParams(12, 1.0, seed=40 + k))],
        )[RequestId("a")].tokens
        for k in range(3)
    ]
    assert [tokens(by_choice[k]) for k in range(3)] == alone
    assert len({tuple(t) for t in alone}) == 3  # they really sample
    # Choice 0 computed the prompt; the others found all of it but the last token (whose
    # logits each needs) in the prefix cache.
    cached = [finish(by_choice[k]).num_cached_prompt_tokens for k in range(3)]
    assert cached == [0, len(prompt) - 1, len(prompt) - 1]
    stats = engine.stats()
    assert stats.num_prefix_hit_tokens == 2 * (len(prompt) - 1)


def test_choices_wait_for_the_first_ones_prompt_and_end_with_it_when_it_never_starts(
    smollm2: LanguageModel,
) -> None:
    prompt = chat_ids(smollm2, QUESTION)
    engine = make_engine(smollm2, prefix_cache=True)
    request = GenerationRequest(
        RequestId("late"),
        prompt,
        SamplingParams(max_tokens=4, n=3),
        clock=RequestClock(0.0),
        deadline_ts=0.0,  # long past: it expires before its first step
    )
    by_choice = run_choices(engine, request)
    ends = [finish(by_choice[k]) for k in range(3)]
    assert [e.reason for e in ends] == [FinishReason.TIMEOUT] * 3
    assert [e.num_output_tokens for e in ends] == [0, 0, 0]


def test_abort_ends_running_and_waiting_choices_and_frees_their_blocks(
    smollm2: LanguageModel,
) -> None:
    prompt = chat_ids(smollm2, QUESTION)
    engine = make_engine(smollm2, prefix_cache=True)
    engine.add_request(GenerationRequest(RequestId("x"), prompt, SamplingParams(50, n=3)))
    for _ in range(3):  # choice 0's prefill, then the others start beside it
        engine.step()
    assert engine.stats().num_running == 3
    ended = engine.abort_request(RequestId("x"))
    assert sorted(e.index for _, e in ended) == [0, 1, 2]
    assert all(isinstance(e, FinishEvent) and e.reason is FinishReason.ABORT for _, e in ended)
    assert not engine.has_work() and engine.pool.num_used == 0
    # Before choice 0's first token, its waiting choices end with it.
    engine.add_request(GenerationRequest(RequestId("y"), prompt, SamplingParams(50, n=2)))
    assert sorted(e.index for _, e in engine.abort_request(RequestId("y"))) == [0, 1]
    assert not engine.has_work()


async def test_the_async_stream_ends_after_every_choice_has_finished(
    smollm2: LanguageModel,
) -> None:
    engine = AsyncLLMEngine(make_engine(smollm2, prefix_cache=True))
    engine.start()
    try:
        prompt = chat_ids(smollm2, QUESTION)
        params = SamplingParams(max_tokens=5, temperature=1.0, seed=1, n=3, ignore_eos=True)
        events = [
            e async for e in engine.generate(GenerationRequest(RequestId("s"), prompt, params))
        ]
    finally:
        engine.stop()
    ends = [e for e in events if isinstance(e, FinishEvent)]
    assert sorted(e.index for e in ends) == [0, 1, 2] and isinstance(events[-1], FinishEvent)
    assert all(e.num_output_tokens == 5 for e in ends)


@pytest.mark.parametrize("prefix_cache", [False, True], ids=["no-prefix-cache", "prefix-cache"])
def test_prompt_logprobs_are_the_models_own_over_chunked_prefill(
    smollm2: LanguageModel, prefix_cache: bool
) -> None:
    """Each prompt token's logprob and top 3 against log_softmax of the logits the model
    gives for the prompt cut just before it; the prompt is prefilled in chunks of 8, and
    (with the prefix cache) after a request that cached its blocks."""
    prompt = smollm2.tokenizer.encode("The lighthouse stood on a rock at the mouth of the bay.")
    engine = make_engine(smollm2, prefix_cache=prefix_cache, max_num_batched_tokens=16)
    if prefix_cache:
        run(engine, [GenerationRequest(RequestId("warm"), prompt, SamplingParams(1))])
    params = SamplingParams(max_tokens=2, temperature=0.0, prompt_logprobs=3)
    events = run_choices(engine, GenerationRequest(RequestId("p"), prompt, params))[0]
    first, *rest = [e for e in events if isinstance(e, TokenEvent)]
    assert all(not e.prompt_logprobs for e in rest)
    scored = first.prompt_logprobs
    assert [s.token_id for s in scored] == prompt[1:]
    # The reference: a one-token request on each prefix, its logits recorded.
    cuts = [
        GenerationRequest(RequestId(f"cut{p}"), prompt[: p + 1], SamplingParams(1, 0.0))
        for p in range(len(prompt) - 1)
    ]
    reference = make_engine(smollm2, num_blocks=128)
    outcomes = {r.request_id: Outcome() for r in cuts}
    with recording_logits(reference, outcomes):
        for r in cuts:
            reference.add_request(r)
        while reference.has_work():
            for rid, event in reference.step():
                outcomes[rid].add(event)
    for p, s in enumerate(scored):
        lp = outcomes[RequestId(f"cut{p}")].logits[0].float().log_softmax(-1)
        assert s.logprob == pytest.approx(float(lp[prompt[p + 1]]), abs=2e-4)
        top = torch.topk(lp, 3)
        assert [t.token_id for t in s.top] == top.indices.tolist()
        assert [t.logprob for t in s.top] == pytest.approx(top.values.tolist(), abs=2e-4)
    assert finish(events).num_cached_prompt_tokens == 0  # no hit: every position scored
