"""Pick each sequence's next token from its logits row.

Greedy rows are one batched argmax. Random rows use the request's own
torch.Generator, so a seeded request draws the same numbers whatever else
shares its batch.
"""

from __future__ import annotations

import torch

from vigil.engine.request import SamplingParams


def sample(
    logits: torch.Tensor,  # (N, V) float32
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
) -> list[int]:
    tokens = logits.argmax(dim=-1).tolist()
    for i, p in enumerate(params):
        if not p.greedy:
            gen = generators[i]
            assert gen is not None, "a random-sampling request has no generator"
            tokens[i] = _sample_row(logits[i], p, gen)
    return [int(t) for t in tokens]


def _sample_row(row: torch.Tensor, p: SamplingParams, gen: torch.Generator) -> int:
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
    probs = row.softmax(-1)
    return int(torch.multinomial(probs, 1, generator=gen).item())


def make_generator(seed: int | None, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    return gen
