"""Tiny GGUF files that tests write with the `gguf` package, as llama.cpp's
convert_hf_to_gguf.py does for each architecture: the tensor names from gguf's own map
(the converter's), attn_q / attn_k permuted for `llama` files, Gemma's norm weights
stored plus one, llama3 scaling as a `rope_freqs` tensor; the matrices as float32 or
quantized with the package's own quantizers (`gguf.quants.quantize`), one type a
tensor as the caller chooses (llama.cpp's own files mix them: Q4_K_M's Q6_K tensors)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
import transformers
from tiny_checkpoints import VOCAB
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

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
