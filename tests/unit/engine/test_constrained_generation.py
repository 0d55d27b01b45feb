"""Constrained decoding, logprobs and seeds through the real engine on the bundled
SmolLM2: continuous batching mixes constrained and free sequences, prefix caching and
preemption keep each matcher where its tokens left it."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest
import torch
from schemas import USER_RECORD

from vigil.engine.async_engine import AsyncLLMEngine
from vigil.engine.grammar import GrammarError
from vigil.engine.grammar_masks import GrammarMasks
from vigil.engine.loaders.llm import LanguageModel
from vigil.engine.request import (
    Constraint,
    FinishEvent,
    FinishReason,
    GenerationRequest,
    RequestId,
    SamplingParams,
    TokenEvent,
)

from .test_llm_engine import Outcome, chat_ids, make_engine, recording_logits, run

pytestmark = pytest.mark.slow

SCHEMA = USER_RECORD
QUESTIONS = [
    "Describe a user called Ada who lives in Paris as JSON.",
    "Give me a JSON record for an editor from Rome.",
    "Who is the admin? Answer in JSON.",
    "Make up a viewer account.",
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three colours.",
    "Name a planet.",
]


def req(lm: LanguageModel, i: int, params: SamplingParams, tag: str = "") -> GenerationRequest:
    prompt = chat_ids(lm, QUESTIONS[i % len(QUESTIONS)])
    return GenerationRequest(RequestId(f"{tag}r{i}"), prompt, params)


def constrained(seed: int | None = None, **kw: object) -> SamplingParams:
    temperature = 0.0 if seed is None else 0.8
    return SamplingParams(
        max_tokens=96,
        temperature=temperature,
        seed=seed,
        constraint=Constraint.json_schema(SCHEMA),
        **kw,  # type: ignore[arg-type]
    )


def assert_valid(out: Outcome) -> None:
    assert out.finish is not None and out.finish.reason is FinishReason.STOP, out.text
    jsonschema.validate(json.loads(out.text), SCHEMA)


@pytest.mark.parametrize("prefix_cache", [False, True], ids=["no-prefix-cache", "prefix-cache"])
def test_constrained_and_free_share_batches_and_the_json_validates(
    smollm2: LanguageModel, prefix_cache: bool
) -> None:
    # A budget of 64 tokens a step: prompts are admitted over several steps, so
    # constrained sequences join and leave a running batch of free ones.
    engine = make_engine(smollm2, num_blocks=128, prefix_cache=prefix_cache)
    free = SamplingParams(max_tokens=12, temperature=0.0)
    batch = [req(smollm2, i, constrained()) for i in range(2)]
    batch += [req(smollm2, i, constrained(seed=i)) for i in range(2, 4)]
    batch += [req(smollm2, i, free) for i in range(4, 8)]
    batch += [req(smollm2, i, constrained(), tag="again-") for i in range(2)]  # cached prefixes
    outcomes = run(engine, batch)
    for r in batch:
        if r.params.constraint is not None:
            assert_valid(outcomes[r.request_id])
    alone = run(make_engine(smollm2), [req(smollm2, 4, free)])
    assert outcomes[RequestId("r4")].tokens == alone[RequestId("r4")].tokens
    assert engine.grammars.num_misses == 1  # one schema, compiled once


def test_preempted_constrained_sequences_resume_their_grammar(smollm2: LanguageModel) -> None:
    # 12 blocks of 16 for four ~50-token prompts that each grow by up to 96: someone
    # must be preempted and recomputed, its matcher kept where its tokens left it.
    engine = make_engine(smollm2, num_blocks=12, prefix_cache=True)
    batch = [req(smollm2, i, constrained(seed=None if i % 2 else i)) for i in range(4)]
    outcomes = run(engine, batch)
    assert engine.stats().num_preemptions > 0
    for out in outcomes.values():
        assert_valid(out)


def test_schema_that_cannot_compile_is_refused_before_scheduling(smollm2: LanguageModel) -> None:
    engine = make_engine(smollm2)
    bad = SamplingParams(max_tokens=8, constraint=Constraint.json_schema({"$ref": "#/missing"}))
    request = req(smollm2, 0, bad)
    with pytest.raises(GrammarError, match="missing"):
        engine.check_request(request)
    with pytest.raises(GrammarError):
        engine.add_request(request)
    assert not engine.has_work() and engine.scheduler.num_waiting == 0

    async def through_async_engine() -> list[object]:
        front = AsyncLLMEngine(engine)
        front.start()
        try:
            return [e async for e in front.generate(req(smollm2, 1, bad))]
        finally:
            front.stop()

    [event] = asyncio.run(through_async_engine())
    assert isinstance(event, FinishEvent) and event.reason is FinishReason.ERROR
    assert event.error is not None and "missing" in event.error


def test_logprobs_match_the_models_own_logits(smollm2: LanguageModel) -> None:
    """Chosen and top-5 logprobs of a constrained, sampled request (temperature 0.8,
    top-p 0.9) against log_softmax of the recorded logits, masked by a replayed matcher,
    scaled and cut by top-p by hand."""
    engine = make_engine(smollm2)
    params = constrained(seed=3, top_p=0.9, logprobs=5)
    request = req(smollm2, 0, params)
    events: list[TokenEvent] = []
    outcomes = {request.request_id: Outcome()}
    with recording_logits(engine, outcomes):
        engine.add_request(request)
        while engine.has_work():
            for _, event in engine.step():
                outcomes[request.request_id].add(event)
                if isinstance(event, TokenEvent):
                    events.append(event)
    out = outcomes[request.request_id]
    assert_valid(out)
    replay = engine.grammars.compile(params.constraint).matcher()  # type: ignore[arg-type]
    masks = GrammarMasks(smollm2.config.vocab_size)
    for event, logits in zip(events, out.logits, strict=True):
        [token], [lp] = event.token_ids, event.logprobs
        row = logits.clone()[None]
        masks.apply(row, [0], [replay])
        probs = (row[0].double() - row[0].max()).div(0.8).softmax(-1)
        ranked, order = probs.sort(descending=True)
        kept = order[: int(((ranked.cumsum(-1) - ranked) < 0.9).sum())]
        direct = torch.full_like(probs, float("-inf"))
        direct[kept] = (probs[kept] / probs[kept].sum()).log()
        assert lp.token_id == token
        assert lp.logprob == pytest.approx(float(direct[token]), abs=1e-6)
        assert [t.token_id for t in lp.top] == [int(t) for t in kept[:5]]
        for t in lp.top:
            assert t.logprob == pytest.approx(float(direct[t.token_id]), abs=1e-6)
        replay.advance(token)


def test_seeded_choices_repeat_whatever_shares_their_batch(smollm2: LanguageModel) -> None:
    """n choices as the gateway will send them: seeds s, s+1, s+2 of one prompt."""

    def choices(companions: list[GenerationRequest]) -> list[list[int]]:
        sampled = [
            req(smollm2, 5, SamplingParams(max_tokens=16, temperature=1.0, seed=40 + k), f"c{k}-")
            for k in range(3)
        ]
        outcomes = run(make_engine(smollm2, num_blocks=128), sampled + companions)
        return [outcomes[r.request_id].tokens for r in sampled]

    alone = choices([])
    assert len({tuple(c) for c in alone}) == 3  # three different choices
    greedy_company = [
        req(smollm2, i, SamplingParams(max_tokens=10, temperature=0.0)) for i in range(4)
    ]
    random_company = [req(smollm2, i, constrained(seed=i), "j") for i in range(2)]
    assert choices(greedy_company) == alone
    assert choices(random_company) == alone
