"""What each GGUF architecture's metadata and tensor names mean, in Hugging Face terms.

A GGUF file names its architecture (`general.architecture`) and writes its
hyper-parameters under that prefix; llama.cpp's converter (convert_hf_to_gguf.py)
renames the tensors and, per architecture, changes some of them, which is undone here:

    llama          attn_q / attn_k rows permuted within each head for interleaved
                   RoPE (Mistral's files are `llama` too); llama3 scaling as a
                   `rope_freqs` tensor of per-frequency divisors
    qwen2, qwen3   as Hugging Face's (rotate-half RoPE); Qwen2's q/k/v biases,
                   Qwen3's attn_q_norm / attn_k_norm
    phi3           q/k/v as one attn_qkv, gate/up as one ffn_up (2 x ffn rows)
    gemma2, gemma3 every norm weight stored plus one (llama.cpp multiplies by the
                   weight); ffn_norm is the pre-feed-forward norm, post_attention_norm
                   and post_ffw_norm the sandwich's others

Some of a Hugging Face config is not in the file, and llama.cpp's own rules stand in:
Gemma's query_pre_attn_scalar is head_dim (hidden / heads for the 27B models, 46 or 62
layers), Gemma 2's local layers are the even ones, Gemma 3's five of each six unless the
file writes `attention.sliding_window_pattern`, and Gemma 3's local RoPE base is 10,000
unless it writes `rope.freq_base_swa`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vigil.engine.model.config import DecoderConfig, RopeConfig

# GGUF architecture -> the Hugging Face model_type whose family builds it
MODEL_TYPES = {
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "phi3": "phi3",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
}

LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_OWN_LAYER_NAMES = {
    "phi3": {"ffn_up": "mlp.gate_up_proj"},
    "gemma2": {
        "ffn_norm": "pre_feedforward_layernorm",
        "post_attention_norm": "post_attention_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
    },
}
_OWN_LAYER_NAMES["gemma3"] = _OWN_LAYER_NAMES["gemma2"]

# Architectures whose converter permuted attn_q / attn_k for interleaved RoPE.
PERMUTED_QK = frozenset({"llama"})
# Architectures whose converter stored each norm weight plus one.
NORMS_PLUS_ONE = frozenset({"gemma2", "gemma3"})

Field = Callable[[str, Any], Any]  # (key, default) -> value


def hf_name(arch: str, gguf_name: str) -> str:
    base, _, suffix = gguf_name.rpartition(".")
    if base == "token_embd":
        return "model.embed_tokens.weight"
    if base == "output_norm":
        return "model.norm.weight"
    if base == "output":
        return "lm_head.weight"
    parts = base.split(".")
    names = LAYER_NAMES | _OWN_LAYER_NAMES.get(arch, {})
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in names:
        return f"model.layers.{parts[1]}.{names[parts[2]]}.{suffix}"
    raise ValueError(f"unexpected GGUF tensor {gguf_name!r} for architecture {arch!r}")


def config_from_gguf(
    arch: str, field: Field, tensor_names: set[str], rope_divisors: Sequence[float] | None
) -> DecoderConfig:
    a = arch
    num_heads = int(field(f"{a}.attention.head_count", None))
    hidden = int(field(f"{a}.embedding_length", None))
    num_layers = int(field(f"{a}.block_count", None))
    head_dim = int(field(f"{a}.attention.key_length", 0) or hidden // num_heads)
    vocab = field(f"{a}.vocab_size", None) or len(field("tokenizer.ggml.tokens", None))
    max_position = int(field(f"{a}.context_length", None))
    rope = _rope(a, field, max_position, rope_divisors)
    window = field(f"{a}.attention.sliding_window", None)
    fields: dict[str, Any] = {
        "architecture": MODEL_TYPES[arch],
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "intermediate_size": int(field(f"{a}.feed_forward_length", None)),
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": int(field(f"{a}.attention.head_count_kv", num_heads)),
        "head_dim": head_dim,
        "rope_theta": rope.theta,
        "rope_scaling": None if rope == RopeConfig(rope.theta) else rope,
        "rms_norm_eps": float(field(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)),
        "max_position": max_position,
        "tie_word_embeddings": "output.weight" not in tensor_names,
    }
    if arch == "qwen2":
        fields["qkv_bias"] = True
    if arch == "qwen3":
        fields |= {"qk_norm": True, "qkv_bias": "blk.0.attn_q.bias" in tensor_names}
    if arch == "phi3" and window is not None:
        fields["layer_windows"] = (int(window),) * num_layers
    if arch in ("gemma2", "gemma3"):
        fields |= _gemma(arch, field, num_layers, hidden // num_heads, head_dim, max_position)
    return DecoderConfig(**fields)


def _rope(a: str, field: Field, max_position: int, divisors: Sequence[float] | None) -> RopeConfig:
    kind = field(f"{a}.rope.scaling.type", "none")
    params: dict[str, Any] = {
        "rope_theta": field(f"{a}.rope.freq_base", 10000.0),
        "rope_type": "default" if kind == "none" else kind,
        "factor": field(f"{a}.rope.scaling.factor", None),
        "original_max_position_embeddings": field(
            f"{a}.rope.scaling.original_context_length", None
        ),
    }
    rope = RopeConfig.from_hf(params, max_position)
    if divisors is None:
        return rope
    return RopeConfig(rope.theta, frequency_divisors=tuple(float(d) for d in divisors))


def _gemma(
    arch: str, field: Field, num_layers: int, per_head: int, head_dim: int, max_position: int
) -> dict[str, Any]:
    window = field(f"{arch}.attention.sliding_window", None)
    pattern = field(f"{arch}.attention.sliding_window_pattern", 2 if arch == "gemma2" else 6)
    if isinstance(pattern, int):
        sliding = [pattern == 0 or (i + 1) % pattern != 0 for i in range(num_layers)]
    else:
        sliding = [bool(s) for s in pattern]
    large = num_layers in (46, 62)  # Gemma 2 27B, Gemma 3 27B: llama.cpp's rule
    windows = () if window is None else tuple(int(window) if s else None for s in sliding)
    out: dict[str, Any] = {
        "layer_windows": windows,
        "query_scale": float(per_head if large else head_dim) ** -0.5,
        "hidden_act": "gelu_tanh",
        "attn_softcap": field(f"{arch}.attn_logit_softcapping", None),
        "final_softcap": field(f"{arch}.final_logit_softcapping", None),
    }
    if arch == "gemma3":
        local = {"rope_theta": field(f"{arch}.rope.freq_base_swa", 10000.0)}
        out |= {"qk_norm": True, "local_rope": RopeConfig.from_hf(local, max_position)}
    return out
