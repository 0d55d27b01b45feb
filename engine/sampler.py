"""Pick each sequence's next token from its logits row, and say how likely it was.

Per step, in this order: `logit_bias` is added to the rows that have one, the grammar
mask sets the tokens a constrained row's grammar forbids to -inf, then greedy rows are
one batched argmax and random rows draw from their own torch.Generator, so a seeded
request draws the same numbers whatever else shares its batch. Rows with neither bias
nor grammar are never written: their tokens are exactly those of a batch without them.

Logprobs (only for rows that ask) are read from the distribution the token was
actually drawn from: for a random row, the log-softmax of its logits after bias, mask,
temperature, top-k and top-p (tokens those cut have no chance and are never listed);
for a greedy row, which has no temperature, the plain log-softmax of its logits after
bias and mask. Both in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vigil.engine.grammar import GrammarMatcher
from vigil.engine.grammar_masks import GrammarMasks
from vigil.engine.request import SampledLogprobs, SamplingParams, TokenLogprob


@dataclass(slots=True)
class GrammarRows:
    """The constrained rows of a step, each with its sequence's matcher."""

    masks: GrammarMasks
    rows: list[int]
    matchers: list[GrammarMatcher]


@dataclass(slots=True)
class SampleResult:
    token_ids: list[int]
    logprobs: list[SampledLogprobs | None]  # None for rows that did not ask


def sample(
    logits: torch.Tensor,  # (N, V) float32, modified in place on biased/constrained rows
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
    grammar: GrammarRows | None = None,
) -> SampleResult:
    for i, p in enumerate(params):
        if p.logit_bias:
            ids = torch.tensor([t for t, _ in p.logit_bias], device=logits.device)
            bias = torch.tensor([b for _, b in p.logit_bias], dtype=logits.dtype)
            logits[i].index_add_(0, ids, bias.to(logits.device))
    if grammar is not None and grammar.rows:
        grammar.masks.apply(logits, grammar.rows, grammar.matchers)
    tokens = [int(t) for t in logits.argmax(dim=-1).tolist()]
    logprobs: list[SampledLogprobs | None] = [None] * len(params)
    for i, p in enumerate(params):
        if p.greedy:
            if p.logprobs is not None:
                logprobs[i] = _logprobs(logits[i].double(), tokens[i], p.logprobs)
            continue
        gen = generators[i]
        assert gen is not None, "a random-sampling request has no generator"
        row = _distribution(logits[i], p)
        tokens[i] = int(torch.multinomial(row.softmax(-1), 1, generator=gen).item())
        if p.logprobs is not None:
            logprobs[i] = _logprobs(row, tokens[i], p.logprobs)
    return SampleResult(tokens, logprobs)


def _distribution(row: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """The row's logits (float64) after temperature, top-k and top-p: -inf where cut."""
    # Scaled around the best logit and in float64: the API takes any temperature above
    # 0, and one below float32's range (1e-40) would overflow the logits to inf and the
    # softmax to nan. Around the best logit, it goes to 0 and every other to -inf.
    row = (row - row.max()).double() / p.temperature
    if p.top_k > 0 and p.top_k < row.shape[-1]:
        kth = torch.topk(row, p.top_k).values[-1]
        row = row.masked_fill(row < kth, float("-inf"))
    if p.top_p < 1.0:
        sorted_logits, order = torch.sort(row, descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the tokens ranked above it already cover top_p;
        # the most likely token always stays.
        drop = probs.cumsum(-1) - probs >= p.top_p
        drop[0] = False
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        row = torch.empty_like(row).scatter_(0, order, sorted_logits)
    return row


def _logprobs(row: torch.Tensor, token_id: int, num_top: int) -> SampledLogprobs:
    """row: float64 logits of the distribution token_id was drawn from."""
    lp = row.log_softmax(-1)
    top: tuple[TokenLogprob, ...] = ()
    if num_top > 0:
        values, ids = lp.topk(min(num_top, lp.shape[-1]))
        top = tuple(
            TokenLogprob(int(t), float(v))
            for v, t in zip(values.tolist(), ids.tolist(), strict=True)
            if v != float("-inf")
        )
    return SampledLogprobs(token_id, float(lp[token_id]), top)


def make_generator(seed: int | None, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    return gen
