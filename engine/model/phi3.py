"""Phi-3 and Phi-3.5: Llama's decoder, whose checkpoints already hold q/k/v as one
`qkv_proj` and gate/up as one `gate_up_proj`, in our order (q, k, v; gate, up), so
the weights need no fusing. `sliding_window`, where set (Phi-3-mini's 2047),
applies to every layer. Phi-3.5's `longrope` scaling is refused at load (config.py)."""

from __future__ import annotations

from typing import Any

from vigil.engine.model.config import DecoderConfig, decoder_fields, every_layer_window


def config_from_hf(cfg: dict[str, Any]) -> DecoderConfig:
    return DecoderConfig(**decoder_fields(cfg), layer_windows=every_layer_window(cfg))
