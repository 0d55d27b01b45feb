"""The decoder families Vigil runs, by Hugging Face `model_type`: how each reads its
config and which module builds it (loaders/assembly.py fuses their checkpoints'
q/k/v and gate/up projections into ours)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vigil.engine.model import llama, mistral, phi3, qwen2, qwen3
from vigil.engine.model.config import DecoderConfig
from vigil.engine.model.gemma import (
    GemmaForCausalLM,
    gemma2_config_from_hf,
    gemma3_config_from_hf,
)
from vigil.engine.model.llama import LlamaForCausalLM

CausalLM = LlamaForCausalLM | GemmaForCausalLM


@dataclass(frozen=True, slots=True)
class Family:
    config_from_hf: Callable[[dict[str, Any]], DecoderConfig]
    model: type[LlamaForCausalLM] | type[GemmaForCausalLM]


FAMILIES: dict[str, Family] = {
    "llama": Family(llama.config_from_hf, LlamaForCausalLM),
    "mistral": Family(mistral.config_from_hf, LlamaForCausalLM),
    "qwen2": Family(qwen2.config_from_hf, LlamaForCausalLM),
    "qwen3": Family(qwen3.config_from_hf, LlamaForCausalLM),
    "phi3": Family(phi3.config_from_hf, LlamaForCausalLM),
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
