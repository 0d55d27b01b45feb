"""Mistral: Llama's decoder with a sliding window on every layer, when the config sets
`sliding_window` (Mistral 7B v0.1 does, at 4096; later versions write null and attend
to every earlier key, as Llama does)."""

from __future__ import annotations

from typing import Any

from vigil.engine.model.config import DecoderConfig, decoder_fields, every_layer_window


def config_from_hf(cfg: dict[str, Any]) -> DecoderConfig:
    return DecoderConfig(**decoder_fields(cfg), layer_windows=every_layer_window(cfg))
