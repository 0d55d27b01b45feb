"""Grammars and the sampler on the bundled SmolLM2 tokenizer (no weights): the compile
cache, compile errors, the mask on a batch mixing constrained and free rows, logit_bias
and logprobs against a direct computation."""

from __future__ import annotations

import json
import math

import pytest
import torch

from vigil.engine.grammar import GrammarCompiler, GrammarError
from vigil.engine.grammar_masks import GrammarMasks
from vigil.engine.limits import RequestRejected
from vigil.engine.request import Constraint, ConstraintKind, SamplingParams
from vigil.engine.sampler import GrammarRows, make_generator, sample
from vigil.engine.tokenizer import Tokenizer

CPU = torch.device("cpu")
SCHEMA = {
    "type": "object",
    "properties": {"colour": {"enum": ["red", "green"]}, "n": {"type": "integer"}},
    "required": ["colour", "n"],
}


@pytest.fixture(scope="module")
def compiler(smollm2_tokenizer: Tokenizer) -> GrammarCompiler:
    return GrammarCompiler(smollm2_tokenizer, smollm2_tokenizer.vocab_size, cache_size=2)


def logits_for(tok: Tokenizer, rows: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, tok.vocab_size, generator=gen) * 3


def test_equal_schemas_in_any_spacing_compile_once(compiler: GrammarCompiler) -> None:
    first = Constraint.json_schema(SCHEMA)
    spaced = Constraint.json_schema(json.dumps(SCHEMA, indent=2))
    assert first == spaced
    hits, misses = compiler.num_hits, compiler.num_misses
    assert compiler.compile(first) is compiler.compile(spaced)
    assert compiler.num_misses - misses <= 1 and compiler.num_hits - hits >= 1


def test_property_order_is_kept_because_the_output_follows_it(
    smollm2_tokenizer: Tokenizer,
) -> None:
    reordered = {**SCHEMA, "properties": dict(reversed(SCHEMA["properties"].items()))}
    assert Constraint.json_schema(reordered) != Constraint.json_schema(SCHEMA)
    compiler = GrammarCompiler(smollm2_tokenizer, smollm2_tokenizer.vocab_size)
    matcher = compiler.compile(Constraint.json_schema(reordered)).matcher()
    for t in smollm2_tokenizer.encode('{"n":7,"colour":"green"}'):
        matcher.advance(t)
    assert matcher.num_tokens > 0


def test_cache_drops_the_least_recently_used(smollm2_tokenizer: Tokenizer) -> None:
    compiler = GrammarCompiler(smollm2_tokenizer, smollm2_tokenizer.vocab_size, cache_size=2)
    a, b, c = (Constraint(ConstraintKind.REGEX, p) for p in ("a+", "b+", "c+"))
    ga = compiler.compile(a)
    compiler.compile(b)
    assert compiler.compile(a) is ga  # a is now the most recent; b goes next
    compiler.compile(c)
    assert compiler.num_misses == 3 and compiler.num_hits == 1
    assert compiler.compile(a) is ga
    compiler.compile(b)
    assert compiler.num_misses == 4  # b was dropped and compiled again


@pytest.mark.parametrize(
    ("constraint", "says"),
    [
        (lambda: Constraint.json_schema({"type": "wat"}), "wat"),
        (lambda: Constraint.json_schema({"$ref": "#/nowhere"}), "nowhere"),
        (lambda: Constraint.json_schema('{"type": "object"'), "not valid JSON"),
        (lambda: Constraint.json_schema("[1, 2]"), "JSON object"),
        (lambda: Constraint(ConstraintKind.REGEX, "([0-9"), "regex"),
        (lambda: Constraint(ConstraintKind.GRAMMAR, "start: undefined_rule"), "undefined_rule"),
    ],
    ids=["bad-type", "bad-ref", "not-json", "not-object", "bad-regex", "bad-lark"],
)
def test_constraint_that_cannot_compile_raises_a_grammar_error(
    compiler: GrammarCompiler, constraint, says: str
) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(GrammarError, match=says) as caught:
        compiler.compile(constraint())
    assert isinstance(caught.value, RequestRejected) and caught.value.param == "constraint"


def test_mask_changes_only_constrained_rows_bit_for_bit(
    smollm2_tokenizer: Tokenizer, compiler: GrammarCompiler
) -> None:
    tok = smollm2_tokenizer
    grammar = compiler.compile(Constraint.json_schema(SCHEMA))
    greedy = SamplingParams(max_tokens=8, temperature=0.0)
    rand = SamplingParams(max_tokens=8, temperature=0.9, top_p=0.95)
    params = [greedy, greedy, rand, rand, greedy]
    constrained = [1, 3]
    logits = logits_for(tok, 5)
    reference = logits.clone()
    ref_tokens = sample(
        reference, params, [None, None, make_generator(1, CPU), make_generator(2, CPU), None]
    ).token_ids
    matchers = [grammar.matcher(), grammar.matcher()]
    rows = GrammarRows(GrammarMasks(tok.vocab_size), constrained, matchers)
    gens = [None, None, make_generator(1, CPU), make_generator(2, CPU), None]
    tokens = sample(logits, params, gens, rows).token_ids
    for i in (0, 2, 4):  # free rows: the very same bits and the very same tokens
        assert torch.equal(logits[i], reference[i]) and tokens[i] == ref_tokens[i]
    for i in constrained:
        allowed = logits[i].isfinite().nonzero().flatten().tolist()
        assert {tok.backend.id_to_token(t) for t in allowed} == {'{"'}  # compact, required keys
        assert tokens[i] in allowed


def test_grammar_walks_to_completion_and_stops(
    smollm2_tokenizer: Tokenizer, compiler: GrammarCompiler
) -> None:
    matcher = compiler.compile(Constraint.json_schema(SCHEMA)).matcher()
    for t in smollm2_tokenizer.encode('{"colour":"red","n":42}'):
        assert not matcher.is_stopped
        matcher.advance(t)
    assert matcher.num_tokens > 0
    # Complete: only EOS remains, or nothing at all.
    logits = logits_for(smollm2_tokenizer, 1)
    GrammarMasks(smollm2_tokenizer.vocab_size).apply(logits, [0], [matcher])
    allowed = set(logits[0].isfinite().nonzero().flatten().tolist())
    assert matcher.is_stopped or allowed <= smollm2_tokenizer.eos_token_ids


def test_logit_bias_moves_only_its_row(smollm2_tokenizer: Tokenizer) -> None:
    logits = logits_for(smollm2_tokenizer, 3, seed=1)
    reference = logits.clone()
    worst = int(logits[1].argmin())
    best = int(logits[1].argmax())
    biased = SamplingParams(
        max_tokens=4, temperature=0.0, logit_bias=((worst, 100.0), (best, -100.0))
    )
    plain = SamplingParams(max_tokens=4, temperature=0.0)
    tokens = sample(logits, [plain, biased, plain], [None] * 3).token_ids
    assert tokens[1] == worst
    assert torch.equal(logits[0], reference[0]) and torch.equal(logits[2], reference[2])
    assert logits[1, best] == pytest.approx(float(reference[1, best]) - 100.0)


def test_greedy_logprobs_are_the_log_softmax_of_the_masked_logits(
    smollm2_tokenizer: Tokenizer, compiler: GrammarCompiler
) -> None:
    tok = smollm2_tokenizer
    matcher = compiler.compile(Constraint(ConstraintKind.REGEX, "[0-9]{2,4}")).matcher()
    logits = logits_for(tok, 2, seed=2)
    raw = logits.clone()
    p = SamplingParams(max_tokens=4, temperature=0.0, logprobs=5)
    out = sample(
        logits, [p, p], [None, None], GrammarRows(GrammarMasks(tok.vocab_size), [1], [matcher])
    )
    free = out.logprobs[0]
    assert free is not None
    direct = raw[0].double().log_softmax(-1)
    assert free.token_id == int(direct.argmax()) and free.logprob == pytest.approx(
        float(direct.max())
    )
    assert [t.token_id for t in free.top] == direct.topk(5).indices.tolist()
    constrained = out.logprobs[1]
    assert constrained is not None
    digits = [i for i in range(tok.vocab_size) if is_digits(tok.backend.id_to_token(i))]
    masked = torch.full_like(raw[1], float("-inf"))
    masked[digits] = raw[1, digits]
    direct = masked.double().log_softmax(-1)
    assert constrained.logprob == pytest.approx(float(direct.max()))
    assert [t.token_id for t in constrained.top] == direct.topk(5).indices.tolist()
    assert all(is_digits(tok.backend.id_to_token(t.token_id)) for t in constrained.top)


def is_digits(piece: str) -> bool:
    return 1 <= len(piece) <= 4 and all(c in "0123456789" for c in piece)


def test_random_logprobs_follow_temperature_and_top_p(smollm2_tokenizer: Tokenizer) -> None:
    logits = logits_for(smollm2_tokenizer, 1, seed=3)
    raw = logits[0].clone().double()
    p = SamplingParams(max_tokens=4, temperature=0.7, top_p=0.5, logprobs=20, seed=3)
    out = sample(logits, [p], [make_generator(3, CPU)])
    lp = out.logprobs[0]
    assert lp is not None and lp.token_id == out.token_ids[0]
    probs = (raw / 0.7).softmax(-1)
    ranked, order = probs.sort(descending=True)
    keep = int(((ranked.cumsum(-1) - ranked) < 0.5).sum())  # smallest set covering top_p
    kept = order[:keep]
    renorm = probs[kept] / probs[kept].sum()
    expected = {int(t): math.log(float(q)) for t, q in zip(kept, renorm, strict=True)}
    assert lp.logprob == pytest.approx(expected[lp.token_id], abs=1e-9)
    assert [t.token_id for t in lp.top] == [int(t) for t in kept[:20]]  # only tokens with a chance
    for t in lp.top:
        assert t.logprob == pytest.approx(expected[t.token_id], abs=1e-9)


def test_rows_that_ask_for_no_logprobs_get_none(smollm2_tokenizer: Tokenizer) -> None:
    p = SamplingParams(max_tokens=4, temperature=0.0)
    assert sample(logits_for(smollm2_tokenizer, 2), [p, p], [None, None]).logprobs == [None, None]
