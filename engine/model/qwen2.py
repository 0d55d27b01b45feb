"""Qwen2 and Qwen2.5: Llama's decoder with biases on the q, k and v projections (not on
o). A sliding window applies only where `use_sliding_window` is set, and then to the
layers from `max_window_layers` on (or as `layer_types` lists them); the released
models leave it off, though their configs carry a `sliding_window` value."""

from __future__ import annotations

from typing import Any

from vigil.engine.model.config import DecoderConfig, decoder_fields, layer_windows


def config_from_hf(cfg: dict[str, Any]) -> DecoderConfig:
    return DecoderConfig(**decoder_fields(cfg), qkv_bias=True, layer_windows=qwen_windows(cfg))


def qwen_windows(cfg: dict[str, Any]) -> tuple[int | None, ...]:
    """Qwen2's and Qwen3's rule for which layers slide (transformers' own)."""
    if not cfg.get("use_sliding_window", False):
        return ()
    first = cfg.get("max_window_layers", cfg["num_hidden_layers"])
    pattern = [
        "sliding_attention" if i >= first else "full_attention"
        for i in range(cfg["num_hidden_layers"])
    ]
    return layer_windows(cfg, pattern)
