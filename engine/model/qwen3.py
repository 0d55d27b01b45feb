"""Qwen3: Llama's decoder with an RMSNorm over each head's queries and keys before RoPE
(`q_norm`, `k_norm`, one weight of head_dim each, shared by the heads), and biases
only where `attention_bias` says (on all four projections, as Llama's). Sliding
windows follow Qwen2's rule."""

from __future__ import annotations

from typing import Any

from vigil.engine.model.config import DecoderConfig, decoder_fields
from vigil.engine.model.qwen2 import qwen_windows


def config_from_hf(cfg: dict[str, Any]) -> DecoderConfig:
    bias = bool(cfg.get("attention_bias", False))
    return DecoderConfig(
        **decoder_fields(cfg),
        qkv_bias=bias,
        o_proj_bias=bias,
        qk_norm=True,
        layer_windows=qwen_windows(cfg),
    )
