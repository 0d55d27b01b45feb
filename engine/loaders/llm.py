"""Build a ready-to-run decoder from a GGUF file or a Hugging Face folder."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from vigil.engine.bundled import ModelFormat, ModelSource
from vigil.engine.device import return_freed_memory
from vigil.engine.loaders import hf
from vigil.engine.loaders.gguf import GGUFFile
from vigil.engine.model.config import DecoderConfig
from vigil.engine.model.families import CausalLM, family
from vigil.engine.model.packed import native_bfloat16
from vigil.engine.model.quantized import check_quantization, quantize_model
from vigil.engine.tokenizer import Tokenizer

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LanguageModel:
    name: str
    config: DecoderConfig
    model: CausalLM
    tokenizer: Tokenizer
    device: torch.device
    dtype: torch.dtype


def load_language_model(
    source: ModelSource, device: torch.device, dtype: torch.dtype, quantization: str = "none"
) -> LanguageModel:
    check_quantization(quantization, device)
    if (warning := slow_dtype_warning(device, dtype)) is not None:
        log.warning("%s", warning)
    lm = _load(source, device, dtype, quantization)
    return_freed_memory()  # after _load's locals (the file's map, the raw weights) are gone
    return lm


def slow_dtype_warning(device: torch.device, dtype: torch.dtype) -> str | None:
    """bfloat16 on a CPU without native support is a trap: smaller, and slower."""
    if device.type != "cpu" or dtype != torch.bfloat16 or native_bfloat16():
        return None
    return (
        "this CPU has no native bfloat16 (AVX-512 BF16 or AMX): every bfloat16 matmul "
        "is converted, 1.7-3.5x float32's time on an AVX2 CPU; --quantization int4 is "
        "the smaller and faster choice here"
    )


def _load(
    source: ModelSource, device: torch.device, dtype: torch.dtype, quantization: str
) -> LanguageModel:
    if source.format is ModelFormat.GGUF:
        file = GGUFFile(source.path)
        cfg = file.config()
        weights = file.state_dict(cfg, dtype)
        tokenizer = file.tokenizer()
    else:
        raw = hf.read_config(source.path)
        try:
            cfg = family(raw.get("model_type")).config_from_hf(raw)
        except ValueError as e:
            raise ValueError(f"{source.path}: {e}") from e
        weights = hf.read_safetensors(source.path, dtype)
        tokenizer = hf.read_tokenizer(source.path, raw, add_special_tokens=True)
    model = build_decoder(cfg, weights, device)
    if quantization == "int4":
        quantize_model(model)
    return LanguageModel(source.name, cfg, model, tokenizer, device, dtype)


def build_decoder(
    cfg: DecoderConfig, weights: dict[str, torch.Tensor], device: torch.device
) -> CausalLM:
    """From Hugging Face-named weights (consumed: the dict is emptied as it goes)."""
    # Build on the meta device and adopt the loaded tensors: no time or memory
    # spent on a random initialisation that would be overwritten.
    arch = family(cfg.architecture)
    arch.to_our_layout(weights, cfg.num_layers)
    with torch.device("meta"):
        model = arch.model(cfg)
    allowed_missing = {"lm_head.weight"} if cfg.tie_word_embeddings else set()
    result = model.load_state_dict(weights, strict=False, assign=True)
    missing = set(result.missing_keys) - allowed_missing
    unexpected = {k for k in result.unexpected_keys if not k.endswith("rotary_emb.inv_freq")}
    if missing or unexpected:
        raise ValueError(
            f"weights do not match the model: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.rebuild_buffers()
    return model.to(device).eval()
