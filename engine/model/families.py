"""The decoder families Vigil runs, by Hugging Face `model_type`: how each reads its
config, which module builds it, and how its checkpoint's weights become ours."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from vigil.engine.model import llama, mistral, phi3, qwen2, qwen3
from vigil.engine.model.config import DecoderConfig
from vigil.engine.model.gemma import (
    GemmaForCausalLM,
    gemma2_config_from_hf,
    gemma3_config_from_hf,
)
from vigil.engine.model.llama import LlamaForCausalLM, fuse_projections

CausalLM = LlamaForCausalLM | GemmaForCausalLM


@dataclass(frozen=True, slots=True)
class Family:
    config_from_hf: Callable[[dict[str, Any]], DecoderConfig]
    model: type[LlamaForCausalLM] | type[GemmaForCausalLM]
    # Hugging Face-named weights -> our layout, in place (given the number of layers)
    to_our_layout: Callable[[dict[str, torch.Tensor], int], None] = fuse_projections


FAMILIES: dict[str, Family] = {
    "llama": Family(llama.config_from_hf, LlamaForCausalLM),
    "mistral": Family(mistral.config_from_hf, LlamaForCausalLM),
    "qwen2": Family(qwen2.config_from_hf, LlamaForCausalLM),
    "qwen3": Family(qwen3.config_from_hf, LlamaForCausalLM),
    "phi3": Family(phi3.config_from_hf, LlamaForCausalLM, phi3.keep_layout),
    "gemma2": Family(gemma2_config_from_hf, GemmaForCausalLM),
    "gemma3_text": Family(gemma3_config_from_hf, GemmaForCausalLM),
}


def family(model_type: str | None) -> Family:
    found = FAMILIES.get(model_type or "")
    if found is None:
        raise ValueError(
            f"model_type {model_type!r} is not supported for generation "
            f"(supported: {', '.join(FAMILIES)})"
        )
    return found
