"""`--dtype bfloat16` and `--quantization int4` against float32 on the bundled SmolLM2:
the bounds they are held to.

Two measures, each on fixed inputs shipped here:
- perplexity of a short English text (data/parity_text.txt, written for these tests),
  teacher-forced through our own model forward in one prefill: float32 must match
  transformers' float32, and bfloat16 must stay within a stated margin of float32;
- greedy agreement over a fixed set of completion prompts, decoded together through the
  scheduler, runner and paged KV cache (bfloat16 decodes take the PyTorch attention path:
  the native kernel is float32 only). int4 is decoded both ways its linears run: 4 and
  8 prompts at a time through the fused decode step (the packed int4 kernel this CPU
  uses), and 8 at a time with the switch lowered below 8 rows (matmuls on the
  dequantized weights, in bfloat16 or float32 as this CPU runs them).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from vigil.engine.kv_cache import BlockPool
from vigil.engine.loaders.llm import LanguageModel
from vigil.engine.model import packed
from vigil.engine.model.attention import AttentionMetadata, PrefillSpan
from vigil.engine.request import GenerationRequest, RequestId, SamplingParams
from vigil.engine.runner import ModelRunner
from vigil.engine.scheduler import Scheduler, SchedulerConfig
from vigil.engine.sequence import Sequence

TEXT_PATH = Path(__file__).with_name("data") / "parity_text.txt"

# Measured on this text: float32 equals transformers to the last printed digit (ratio
# 1.0000000); allow float reordering, nothing more.
FLOAT32_PPL_RTOL = 1e-4
# Measured: bfloat16 / float32 perplexity = 0.9989 on this text (34.70 vs 34.74; 1.0011
# on a longer draft of it). A 1% margin leaves ~9x headroom for another CPU's rounding,
# yet a dtype slip (a norm or RoPE left in bfloat16 where float32 is needed, a kernel
# reading bfloat16 as float32) moves it by far more.
BF16_PPL_RTOL = 0.01

PROMPTS = [
    "The capital of France is",
    "Water boils at a temperature of",
    "The three primary colours are",
    "To make a cup of tea, you",
    "def fibonacci(n):",
    "The largest animal in the ocean is the",
    "Once upon a time, in a small village,",
    "A good way to learn a new language is",
]
NUM_GREEDY = 16
# bfloat16 keeps 8 bits of mantissa: over 30 layers its logits drift from float32's by
# up to 0.7 over the text and 1.53 at one greedy step (max over every token; logits span
# about +-25). Up to the first parting the logits must agree within this bound.
BF16_LOGITS_ATOL = 2.5
# Greedy runs may part only at a near-tie: where float32's own logits for its token and
# for bfloat16's differ by less than this (measured at partings: 0.008 to 0.08; a
# typical token's logit moves by 0.2-0.5 in bfloat16, so a gap of 1 can flip).
NEAR_TIE = 1.0
# Measured: 7 of 8 prompts agree on all 16 tokens; 93% of all tokens (119 of 128) come
# before the first divergence ("..., red, blue, and yellow" vs "..., which are the").
MIN_FULL_AGREEMENT = 5 / 8
MIN_TOKENS_BEFORE_DIVERGENCE = 0.7

# int4 on the bundled GGUF: its linears ship as Q4_1 and its tied head and embeddings as
# Q8_0, which int4 groups and (VNNI's) int8 groups hold exactly, so what moves is the
# rounding of the activations: to int8 per group of 32 with the VNNI kernel (as
# llama.cpp's own Q4_1 dot products do), to bfloat16 with ATen's (whose int8 head also
# rounds the Q8_0 table to one scale per row). Measured on an AMD EPYC (VNNI):
# int4 / float32 perplexity 1.0080, logits within 1.16 over the text; greedy 5 of 8
# prompts identical, 86% of tokens before the first parting (at tokens 5, 10 and 15 of
# 16, each at a near-tie), 4 or 8 together. With float32 activations the same weights
# give 1.0000 and 8 of 8: the int8 rounding is all of it. An Intel Xeon on ATen's
# kernels: 1.0022, 6 of 8 and 83%; bfloat16 matmuls 7 of 8 and 93%.
INT4_PPL_RTOL = 0.02
INT4_LOGITS_ATOL = BF16_LOGITS_ATOL
INT4_MIN_FULL_AGREEMENT = 4 / 8


def parity_text() -> str:
    """The shipped text with its line wraps undone: paragraphs stay, lines join."""
    return re.sub(r"(?<!\n)\n(?!\n)", " ", TEXT_PATH.read_text().strip())


def perplexity(logits: torch.Tensor, ids: list[int]) -> float:
    """exp of the mean negative log-likelihood of each token given those before it.
    logits: (L, V), row i predicting token i + 1 (the last row is unused)."""
    nll = F.cross_entropy(logits[:-1].float(), torch.tensor(ids[1:]))
    return math.exp(nll.item())


@torch.inference_mode()
def teacher_forced_logits(lm: LanguageModel, ids: list[int]) -> torch.Tensor:  # (L, V)
    """Every position's logits from one prefill through our model and its KV layout."""
    cfg = lm.config
    n = len(ids)
    kv = torch.zeros(cfg.num_layers, 2, n, cfg.num_kv_heads, cfg.head_dim, dtype=lm.dtype)
    meta = AttentionMetadata(torch.arange(n), 0, None, None, None, [PrefillSpan(0, n, 0, None)])
    hidden = lm.model(torch.tensor(ids), torch.arange(n), kv, meta)
    return lm.model.compute_logits(hidden)


def greedy_batch(
    lm: LanguageModel, prompts: list[list[int]]
) -> tuple[list[list[int]], list[list[torch.Tensor]]]:
    """Greedy tokens and the logits each was picked from, for all prompts decoded together."""
    block_size, num_blocks = 16, 8 * len(prompts)
    budget = sum(len(p) for p in prompts)  # every prompt prefills in the first step
    scheduler = Scheduler(SchedulerConfig(len(prompts), budget, block_size), BlockPool(num_blocks))
    runner = ModelRunner(lm, num_blocks=num_blocks, block_size=block_size)
    params = SamplingParams(max_tokens=NUM_GREEDY + 1, temperature=0.0, ignore_eos=True)
    seqs = []
    for i, ids in enumerate(prompts):
        request = GenerationRequest(RequestId(f"p{i}"), ids, params)
        seqs.append(Sequence(request, arrival_index=0))
        scheduler.add(seqs[-1])
        runner.add_request(request.request_id, None)
    rows: list[torch.Tensor] = []
    handle = lm.model.lm_head.register_forward_hook(lambda m, a, out: rows.append(out))
    logits: dict[RequestId, list[torch.Tensor]] = {s.request_id: [] for s in seqs}
    try:
        while any(len(s.output_ids) < NUM_GREEDY for s in seqs):
            plan = scheduler.schedule()
            result = runner.execute(plan)
            # The sampled rows are in the order of result.sampled (the runner's order).
            for request_id, row in zip(result.sampled, rows.pop(), strict=True):
                logits[request_id].append(row.float())
            scheduler.update(plan, result.sampled)
    finally:
        handle.remove()
    return (
        [s.output_ids[:NUM_GREEDY] for s in seqs],
        [logits[s.request_id][:NUM_GREEDY] for s in seqs],
    )


@pytest.fixture(scope="module")
def text_ids(smollm2) -> list[int]:  # type: ignore[no-untyped-def]
    ids = smollm2.tokenizer.encode(parity_text())
    assert 250 <= len(ids) <= 400  # a few hundred tokens: long enough to average over
    return ids


@pytest.fixture(scope="module")
def float32_logits(smollm2, text_ids: list[int]) -> torch.Tensor:  # type: ignore[no-untyped-def]
    return teacher_forced_logits(smollm2, text_ids)


def test_perplexity_is_exp_of_mean_negative_log_likelihood() -> None:
    # Uniform over 4 tokens: every token has probability 1/4, so perplexity 4.
    assert perplexity(torch.zeros(3, 4), [0, 1, 2]) == pytest.approx(4.0)
    # Certain of each next token: perplexity 1.
    sure = torch.full((3, 4), -1e4)
    sure[0, 1] = sure[1, 2] = 0.0
    assert perplexity(sure, [0, 1, 2]) == pytest.approx(1.0)


@pytest.mark.slow
def test_float32_perplexity_matches_transformers(
    smollm2_hf, text_ids: list[int], float32_logits: torch.Tensor
) -> None:
    model, _ = smollm2_hf
    with torch.inference_mode():
        reference = model(torch.tensor([text_ids])).logits[0]
    ours, theirs = perplexity(float32_logits, text_ids), perplexity(reference, text_ids)
    assert 5 < theirs < 200, f"transformers' own perplexity {theirs:.2f}: not a sane model"
    assert ours == pytest.approx(theirs, rel=FLOAT32_PPL_RTOL)


@pytest.mark.slow
def test_bfloat16_perplexity_within_margin_of_float32(
    smollm2_bf16, text_ids: list[int], float32_logits: torch.Tensor
) -> None:
    bf16_logits = teacher_forced_logits(smollm2_bf16, text_ids)
    assert bf16_logits.dtype == torch.float32  # logits leave the model in float32
    f32, bf16 = perplexity(float32_logits, text_ids), perplexity(bf16_logits, text_ids)
    assert bf16 / f32 == pytest.approx(1.0, abs=BF16_PPL_RTOL), f"{bf16:.3f} vs {f32:.3f}"
    drift = (bf16_logits - float32_logits).abs().max().item()
    assert 0 < drift <= BF16_LOGITS_ATOL  # bfloat16 really ran, and within the bound


@pytest.mark.slow
def test_int4_perplexity_within_margin_of_float32(
    smollm2_int4, text_ids: list[int], float32_logits: torch.Tensor
) -> None:
    int4_logits = teacher_forced_logits(smollm2_int4, text_ids)
    f32, int4 = perplexity(float32_logits, text_ids), perplexity(int4_logits, text_ids)
    assert int4 / f32 == pytest.approx(1.0, abs=INT4_PPL_RTOL), f"{int4:.3f} vs {f32:.3f}"
    drift = (int4_logits - float32_logits).abs().max().item()
    print(f"int4 / float32 perplexity {int4 / f32:.4f}, logits within {drift:.3g}")
    assert 0 < drift <= INT4_LOGITS_ATOL  # the int4 linears really ran, and within the bound


def tokens_before_parting(
    f32_tokens: list[int],
    f32_logits: list[torch.Tensor],
    other_tokens: list[int],
    other_logits: list[torch.Tensor],
    atol: float = BF16_LOGITS_ATOL,
) -> int:
    """How many tokens two greedy runs of one prompt share before they part; they may
    part only at a near-tie, and until then their logits agree within the bound."""
    steps = zip(f32_tokens, other_tokens, f32_logits, other_logits, strict=True)
    for step, (a, b, la, lb) in enumerate(steps):
        drift = (la - lb).abs().max().item()
        assert drift <= atol, f"step {step}: logits differ by {drift:.3g}"
        if a != b:
            gap = (la[a] - la[b]).item()
            assert gap <= NEAR_TIE, f"step {step}: parted at {a} vs {b}, no near-tie ({gap:.3g})"
            return step
    return len(f32_tokens)


@pytest.mark.slow
def test_bfloat16_greedy_agrees_with_float32(smollm2, smollm2_bf16) -> None:  # type: ignore[no-untyped-def]
    prompts = [smollm2.tokenizer.encode(p) for p in PROMPTS]
    f32_runs = zip(*greedy_batch(smollm2, prompts), strict=True)
    bf16_runs = zip(*greedy_batch(smollm2_bf16, prompts), strict=True)
    agreed = [
        tokens_before_parting(*f32, *bf16) for f32, bf16 in zip(f32_runs, bf16_runs, strict=True)
    ]
    full = sum(n == NUM_GREEDY for n in agreed) / len(agreed)
    before = sum(agreed) / (NUM_GREEDY * len(agreed))
    assert full >= MIN_FULL_AGREEMENT, f"tokens before divergence per prompt: {agreed}"
    assert before >= MIN_TOKENS_BEFORE_DIVERGENCE, f"per prompt: {agreed}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("together", "few_rows"),
    [(4, 8), (8, 8), (8, 4)],
    ids=["fused-packed-4", "fused-packed-8", "many-rows-8"],
)
def test_int4_greedy_agrees_with_float32(  # type: ignore[no-untyped-def]
    smollm2, smollm2_int4, together: int, few_rows: int, monkeypatch
) -> None:
    # Decode steps of `together` rows: up to few_rows the fused step and packed kernels,
    # beyond it matmuls on the dequantized weights (bfloat16 or float32, as the CPU
    # chooses; the switch lowered to reach that path with the 8 prompts there are).
    if few_rows < together and packed.few_rows(packed.choose_kernel(True)) is None:
        pytest.skip("this CPU's kernel takes every row: there is no bfloat16 copy")
    for name in ("FEW_ROWS", "AVX2_FEW_ROWS", "VNNI_FEW_ROWS"):
        monkeypatch.setattr(packed, name, few_rows)
    prompts = [smollm2.tokenizer.encode(p) for p in PROMPTS]
    agreed = []
    for start in range(0, len(prompts), together):
        group = prompts[start : start + together]
        f32_runs = zip(*greedy_batch(smollm2, group), strict=True)
        int4_runs = zip(*greedy_batch(smollm2_int4, group), strict=True)
        agreed += [
            tokens_before_parting(*f32, *int4, atol=INT4_LOGITS_ATOL)
            for f32, int4 in zip(f32_runs, int4_runs, strict=True)
        ]
    full = sum(n == NUM_GREEDY for n in agreed) / len(agreed)
    before = sum(agreed) / (NUM_GREEDY * len(agreed))
    print(f"int4, {together} together, few rows {few_rows}: tokens before parting {agreed}")
    assert full >= INT4_MIN_FULL_AGREEMENT, f"tokens before divergence per prompt: {agreed}"
    assert before >= MIN_TOKENS_BEFORE_DIVERGENCE, f"per prompt: {agreed}"
