"""Tiny GGUF files that tests write with the `gguf` package, as llama.cpp's
convert_hf_to_gguf.py does for each architecture: the tensor names from gguf's own map
(the converter's), attn_q / attn_k permuted for `llama` files, Gemma's norm weights
stored plus one, llama3 scaling as a `rope_freqs` tensor; the matrices as float32 or
quantized with the package's own quantizers (`gguf.quants.quantize`), one type a
tensor as the caller chooses (llama.cpp's own files mix them: Q4_K_M's Q6_K tensors).

And the check of a quantized file through the engine (`check`), against the same file
loaded as float32 (`none`: its own dequantized weights):

- the weights each packed linear holds, read back through its kernel, within the
  type's stated error of the file's over the largest weight: int4 1e-3 (Q4_K's scales
  rounded to float16; Q4_0 and Q4_1 exact), int8 5e-3 (Q5_1, Q5_K and Q6_K requantized
  to 1/127 of each group's largest; Q8_0 and Q5_0 exact); ATen's kernels round the
  scales to bfloat16, 1e-2;
- teacher-forced on the engine's greedy tokens, logits within 15% of the largest logit
  on the kernel this CPU runs (VNNI rounds activations to int8 per group of 32). These
  random models amplify any rounding (weights of 0.2 deviation; Q8_0's own 0.4% weight
  error moves their logits by 0.4 of 6.5): a misplaced block or row moves them by all.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
import transformers
from tiny_checkpoints import VOCAB, prompts, run_engine
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from vigil.engine.bundled import ModelFormat, ModelKind, ModelSource
from vigil.engine.loaders.llm import LanguageModel, load_language_model
from vigil.engine.model.attention import AttentionMetadata, PrefillSpan
from vigil.engine.model.codes import GROUP_SIZE
from vigil.engine.model.packed import Kernel, int8_group
from vigil.engine.model.quantized import Int4Linear, Int8Linear, PackedLinear
from vigil.engine.request import RequestId

RELATIVE_TOLERANCE = 0.15
# What a packed linear may hold off the file's weights, over the largest weight: int4
# and int8 in Q8_0's groups of 32 (VNNI) hold the file's codes, with float16 scales;
# ATen's kernels round scales (and int4's zeros) to bfloat16, and an int8 of one
# bfloat16 scale a row (ATen's, AVX2's) requantizes the file's groups of 32 as well
# (seen on AVX2: 5.6e-3 over random Q8_0 weights)
HELD_TOLERANCE = {Int4Linear: 1e-3, Int8Linear: 5e-3}
ROUNDED_HELD_TOLERANCE = 1e-2

# A matrix's GGUF name -> the type it is written as (F32: as it is)
TensorTypes = Callable[[str], gguf.GGMLQuantizationType]


def float32(name: str) -> gguf.GGMLQuantizationType:
    return gguf.GGMLQuantizationType.F32


# Hugging Face model_type -> GGUF architecture (Mistral's files are `llama`).
ARCHITECTURES = {
    "llama": gguf.MODEL_ARCH.LLAMA,
    "mistral": gguf.MODEL_ARCH.LLAMA,
    "qwen2": gguf.MODEL_ARCH.QWEN2,
    "qwen3": gguf.MODEL_ARCH.QWEN3,
    "phi3": gguf.MODEL_ARCH.PHI3,
    "gemma2": gguf.MODEL_ARCH.GEMMA2,
    "gemma3_text": gguf.MODEL_ARCH.GEMMA3,
}


def _permute(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """convert_hf_to_gguf's LlamaModel.permute: rotate-half rows -> interleaved pairs."""
    pairs = w.reshape(num_heads, 2, w.shape[0] // num_heads // 2, *w.shape[1:])
    return pairs.swapaxes(1, 2).reshape(w.shape)


def _rope_keys(writer: gguf.GGUFWriter, params: dict[str, Any]) -> None:
    writer.add_rope_freq_base(float(params["rope_theta"]))
    kind = params.get("rope_type", "default")
    if kind in ("linear", "yarn"):
        writer.add_rope_scaling_type(gguf.RopeScalingType(kind))
        writer.add_rope_scaling_factor(float(params["factor"]))
    if kind == "yarn":
        writer.add_rope_scaling_orig_ctx_len(int(params["original_max_position_embeddings"]))


def write_gguf(
    path: Path, model: transformers.PreTrainedModel, types: TensorTypes = float32
) -> None:
    cfg = model.config
    model_type = cfg.model_type
    arch = ARCHITECTURES[model_type]
    writer = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_key_length(cfg.head_dim)
    writer.add_value_length(cfg.head_dim)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    params = cfg.rope_parameters
    if model_type == "gemma3_text":
        _rope_keys(writer, params["full_attention"])
        writer.add_rope_freq_base_swa(float(params["sliding_attention"]["rope_theta"]))
        writer.add_sliding_window_pattern([t == "sliding_attention" for t in cfg.layer_types])
    else:
        _rope_keys(writer, params)
    if getattr(cfg, "sliding_window", None) is not None and model_type != "mistral":
        writer.add_sliding_window(cfg.sliding_window)
    if model_type == "gemma2":
        writer.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
        writer.add_final_logit_softcapping(cfg.final_logit_softcapping)
    # A byte-level BPE the loader can build (one merge: gguf writes no empty arrays);
    # the tests feed token ids, so the strings only need to be distinct.
    tokens = ["<unk>", "<s>", "</s>", "w", "3", "w3"] + [f"w{i}" for i in range(6, VOCAB)]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.NORMAL] * (VOCAB - 3))
    writer.add_token_merges(["w 3"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    if params.get("rope_type") == "llama3":  # the converter's per-frequency divisors
        plain, _ = ROPE_INIT_FUNCTIONS["linear"](_unscaled(cfg))
        scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg)
        writer.add_tensor("rope_freqs.weight", (plain / scaled).numpy().astype(np.float32))
    names = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    for hf, tensor in model.state_dict().items():
        if hf == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        name = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        assert name is not None, hf
        w = tensor.detach().float()
        if arch == gguf.MODEL_ARCH.LLAMA and hf.endswith("q_proj.weight"):
            w = _permute(w, cfg.num_attention_heads)
        elif arch == gguf.MODEL_ARCH.LLAMA and hf.endswith("k_proj.weight"):
            w = _permute(w, cfg.num_key_value_heads)
        elif model_type.startswith("gemma") and hf.endswith("norm.weight"):
            w = w + 1.0
        qtype = types(name) if w.dim() == 2 else gguf.GGMLQuantizationType.F32
        if qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, w.numpy())
        else:
            writer.add_tensor(name, gguf.quants.quantize(w.numpy(), qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _unscaled(cfg: transformers.PreTrainedConfig) -> transformers.PreTrainedConfig:
    """A copy of cfg whose RoPE is 'linear' with factor 1: the plain frequencies."""
    plain = type(cfg).from_dict(cfg.to_dict())
    plain.rope_parameters = {"rope_type": "linear", "factor": 1.0} | {
        "rope_theta": cfg.rope_parameters["rope_theta"]
    }
    return plain


def load(path: Path, quantization: str) -> LanguageModel:
    source = ModelSource(path.stem, ModelKind.GENERATE, ModelFormat.GGUF, path)
    return load_language_model(source, torch.device("cpu"), torch.float32, quantization)


@torch.inference_mode()
def logits_of(lm: LanguageModel, ids: list[int]) -> torch.Tensor:  # (L, V), one prefill
    cfg, n = lm.config, len(ids)
    kv = torch.zeros(cfg.num_layers, 2, n, cfg.num_kv_heads, cfg.head_dim)
    meta = AttentionMetadata(torch.arange(n), 0, None, None, None, [PrefillSpan(0, n, 0, None)])
    return lm.model.compute_logits(lm.model(torch.tensor(ids), torch.arange(n), kv, meta))


def worst_difference(ours: LanguageModel, reference: LanguageModel) -> tuple[float, float]:
    """The engine's greedy run of `ours` (decodes, fused where it can), each logit row
    against `reference`'s at the same position of the same tokens: (largest difference,
    largest |logit| of the reference)."""
    asked = prompts()
    run = run_engine(ours, asked, native_attention=True)
    worst = scale = 0.0
    for i, prompt in enumerate(asked):
        request = RequestId(f"r{i}")
        expected = logits_of(reference, prompt + run.tokens[request])
        for j, row in enumerate(run.rows[request]):
            at = expected[len(prompt) + j - 1]
            worst = max(worst, float((row - at).abs().max()))
            scale = max(scale, float(at.abs().max()))
    return worst, scale


def assert_holds_the_files_weights(ours: LanguageModel, reference: LanguageModel) -> None:
    """Every packed linear's weights, read back through its kernel (one 1.0 a row: exact
    for every kernel's activations), against the float model's of the same file."""
    floats = dict(reference.model.named_modules())
    for name, linear in ours.model.named_modules():
        if not isinstance(linear, PackedLinear):
            continue
        held = linear.packed_mm(torch.eye(linear.in_features)).T
        # the head (tied, it is found first as the embeddings' rows)
        is_head = linear is ours.model.lm_head
        expected = reference.model.lm_head.weight if is_head else floats[name].weight
        error = float((held - expected).abs().max() / expected.abs().max())
        assert error <= held_tolerance(linear), name


def held_tolerance(linear: PackedLinear) -> float:
    per_row = isinstance(linear, Int8Linear) and (
        int8_group(linear.kernel, linear.in_features) != GROUP_SIZE
    )
    if linear.kernel is Kernel.ATEN or per_row:
        return ROUNDED_HELD_TOLERANCE
    return HELD_TOLERANCE[type(linear)]


def check(file: Path, path: str, tolerance: float = RELATIVE_TOLERANCE) -> LanguageModel:
    """The file loads with auto on `path`, holds its weights, and answers as its float32."""
    auto, float32 = load(file, "auto"), load(file, "none")
    assert auto.precision.quantization == path
    assert_holds_the_files_weights(auto, float32)
    worst, scale = worst_difference(auto, float32)
    print(f"{file.name} ({path}): max |logit diff| {worst:.3g} of {scale:.3g}")
    assert worst <= tolerance * scale
    return auto
