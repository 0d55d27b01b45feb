"""Tiny Hugging Face model folders that tests make with transformers and tokenizers,
offline, and the engine run that holds Vigil's decoders to them.

Each checkpoint: AutoConfig.for_model + AutoModelForCausalLM.from_config, random norms
and biases so that a weight left unread shows, saved as a Hugging Face folder. The
engine run (scheduler, runner, paged KV cache in 4-token blocks, chunked prefill
beside decodes) takes three prompts of different lengths together, greedy; the
prompts are longer than the sliding windows, so the windows decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from vigil.engine.llm_engine import EngineConfig, LLMEngine
from vigil.engine.loaders.llm import LanguageModel
from vigil.engine.request import GenerationRequest, RequestId, SamplingParams, TokenEvent
from vigil.engine.runner import kv_bytes_per_token
from vigil.engine.scheduler import StepPlan


def save_word_tokenizer(folder: Path, vocab_size: int) -> None:
    """tokenizer.json of whole words: "<unk>", "<s>", "</s>", then "w3" .. "w{vocab_size-1}",
    so that a test writes token ids as text and back exactly."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, vocab_size)}
    tokenizer = HFTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(folder / "tokenizer.json"))


# float32 on both sides; what differs is the order of float operations (observed
# under 2e-5 on these logits of a few units).
ATOL = 1e-4
VOCAB = 300
WINDOW = 6  # shorter than every prompt below
PROMPT_LENGTHS = (7, 13, 19)
NUM_OUTPUTS = 8

SHAPE: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 128,
    "initializer_range": 0.2,  # logits of a few units: greedy far from ties
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}

# (model_type, what each case adds to the shape). Each family once, and the windows,
# soft-caps and RoPE scalings that change its arithmetic.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2": ("qwen2", {"tie_word_embeddings": True}),
    "qwen2-window": (
        "qwen2",
        {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1},
    ),
    "mistral-window": ("mistral", {"sliding_window": WINDOW}),
    "mistral-no-window": ("mistral", {"sliding_window": None}),
    "qwen3": ("qwen3", {}),
    "phi3": ("phi3", {"sliding_window": WINDOW}),
    "gemma2": (
        "gemma2",
        {
            "sliding_window": WINDOW,
            "query_pre_attn_scalar": 24,  # not head_dim, so the scale is read
            "attn_logit_softcapping": 2.0,  # small caps, so that tanh bends the logits
            "final_logit_softcapping": 4.0,
        },
    ),
    "gemma3": (
        "gemma3_text",
        {
            "sliding_window": WINDOW,
            "query_pre_attn_scalar": 24,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5000.0},
            },
        },
    ),
    "llama-rope-llama3": (
        "llama",
        {
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500.0,
                "factor": 4.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            }
        },
    ),
    "llama-rope-yarn": (
        "llama",
        {
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 500.0,
                "factor": 4.0,
                "original_max_position_embeddings": 32,
            }
        },
    ),
    "llama-rope-linear": (
        "llama",
        {"rope_parameters": {"rope_type": "linear", "rope_theta": 500.0, "factor": 3.0}},
    ),
    "llama-rope-dynamic": (
        "llama",
        {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 500.0, "factor": 2.0}},
    ),
}


@dataclass
class Tiny:
    """Vigil's model and transformers' reference, from the same checkpoint."""

    ours: LanguageModel
    reference: transformers.PreTrainedModel

    @torch.inference_mode()
    def reference_logits(self, ids: list[int]) -> torch.Tensor:  # (L, V), no cache
        return self.reference(torch.tensor([ids])).logits[0].float()

    def reference_greedy(self, prompt: list[int], num: int) -> list[int]:
        tokens = list(prompt)
        for _ in range(num):
            tokens.append(int(self.reference_logits(tokens)[-1].argmax()))
        return tokens[len(prompt) :]


def save_tiny(folder: Path, model_type: str, extra: dict[str, Any]) -> transformers.PreTrainedModel:
    config = transformers.AutoConfig.for_model(model_type, **(SHAPE | extra))
    with torch.random.fork_rng():  # seeded, without touching the global generator
        torch.manual_seed(1234)
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager"
        ).eval()
        with torch.no_grad():  # norms other than their init, biases other than zero
            for name, param in model.named_parameters():
                if "norm" in name or name.endswith(".bias"):
                    param.add_(0.2 * torch.randn_like(param))
    model.save_pretrained(folder)
    save_word_tokenizer(folder, VOCAB)
    return model


def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


@dataclass
class EngineRun:
    tokens: dict[RequestId, list[int]]  # each request's greedy tokens
    rows: dict[RequestId, list[torch.Tensor]]  # the logit rows they were sampled from
    num_preemptions: int


def run_engine(
    lm: LanguageModel, prompts: list[list[int]], native_attention: bool, num_blocks: int = 32
) -> EngineRun:
    """Greedy through the real engine, all prompts at once, in a KV cache of num_blocks
    4-token blocks."""
    config = EngineConfig(
        block_size=4,
        kv_cache_memory_bytes=kv_bytes_per_token(lm) * 4 * num_blocks,
        max_num_seqs=4,
        max_num_batched_tokens=8,  # chunked prefills, beside the decodes
        native_attention=native_attention,
    )
    engine = LLMEngine(lm, config)
    rows: dict[RequestId, list[torch.Tensor]] = {}
    step_logits: list[torch.Tensor] = []
    compute_logits = lm.model.compute_logits
    execute = engine.runner.execute

    def recording_logits(hidden: torch.Tensor) -> torch.Tensor:
        step_logits.append(compute_logits(hidden))
        return step_logits[-1]

    def recording_execute(plan: StepPlan) -> Any:
        result = execute(plan)
        # The runner's row order: decodes first, then prefill chunks, each in plan order.
        ordered = sorted(
            plan.scheduled,
            key=lambda s: not (s.num_new_tokens == 1 and s.seq.num_computed_tokens > 0),
        )
        sampling = [s.seq.request_id for s in ordered if s.samples]
        for request_id, row in zip(sampling, step_logits.pop(), strict=True):
            assert int(row.argmax()) == result.sampled[request_id]  # greedy: rows line up
            rows.setdefault(request_id, []).append(row)
        return result

    lm.model.compute_logits = recording_logits  # type: ignore[method-assign]
    engine.runner.execute = recording_execute  # type: ignore[method-assign]
    tokens: dict[RequestId, list[int]] = {}
    try:
        params = SamplingParams(max_tokens=NUM_OUTPUTS, temperature=0.0, ignore_eos=True)
        for i, ids in enumerate(prompts):
            engine.add_request(GenerationRequest(RequestId(f"r{i}"), ids, params))
            tokens[RequestId(f"r{i}")] = []
        while engine.has_work():
            for request_id, event in engine.step():
                if isinstance(event, TokenEvent):
                    tokens[request_id].extend(event.token_ids)
    finally:
        del lm.model.compute_logits
    return EngineRun(tokens, rows, engine.scheduler.num_preemptions)


def assert_engine_matches_reference(
    tiny: Tiny, native_attention: bool, num_blocks: int = 32
) -> EngineRun:
    """The engine's greedy tokens equal transformers' own, and every logit row they
    were sampled from is within ATOL of transformers' at that position; prints the
    largest difference."""
    asked = prompts()
    run = run_engine(tiny.ours, asked, native_attention, num_blocks)
    tokens, rows = run.tokens, run.rows
    worst = 0.0
    for i, prompt in enumerate(asked):
        ours = tokens[RequestId(f"r{i}")]
        assert ours == tiny.reference_greedy(prompt, NUM_OUTPUTS)
        reference = tiny.reference_logits(prompt + ours)
        for j, row in enumerate(rows[RequestId(f"r{i}")]):
            expected = reference[len(prompt) + j - 1]
            worst = max(worst, float((row - expected).abs().max()))
            torch.testing.assert_close(row, expected, atol=ATOL, rtol=0)
    print(f"max |logit diff| {worst:.2e}")
    return run
