"""Build a ready-to-run decoder from a GGUF file or a Hugging Face folder."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from vigil.engine.bundled import ModelFormat, ModelSource
from vigil.engine.device import return_freed_memory
from vigil.engine.loaders import hf
from vigil.engine.loaders.assembly import assemble_decoder
from vigil.engine.loaders.gguf import GGUFFile
from vigil.engine.model.codes import Weight
from vigil.engine.model.config import DecoderConfig
from vigil.engine.model.families import CausalLM, family
from vigil.engine.model.packed import native_bfloat16
from vigil.engine.model.quantized import check_quantization
from vigil.engine.precision import Precision, resolve_precision
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
    precision: Precision  # what the weights run as and why (--quantization auto resolved)


def load_language_model(
    source: ModelSource, device: torch.device, dtype: torch.dtype, quantization: str = "none"
) -> LanguageModel:
    """`quantization`: none | int4 | int8 | auto (resolved against the model's files
    and the device: precision.py); the choice and its reason are on the result."""
    check_quantization(quantization, device)
    if (warning := slow_dtype_warning(device, dtype)) is not None:
        log.warning("%s", warning)
    lm = _load(source, device, dtype, quantization)
    return_freed_memory()  # after _load's locals (the file's codes, read buffers) are gone
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
    dtype_name = str(dtype).removeprefix("torch.")
    weights: Iterable[tuple[str, Weight]]
    if source.format is ModelFormat.GGUF:
        cfg, tokenizer, precision, weights = _open_gguf(source, device, dtype_name, quantization)
    else:
        raw = hf.read_config(source.path)
        try:
            cfg = family(raw.get("model_type")).config_from_hf(raw)
        except ValueError as e:
            raise ValueError(f"{source.path}: {e}") from e
        tokenizer = hf.read_tokenizer(source.path, raw, add_special_tokens=True)
        precision = resolve_precision(quantization, device.type, dtype_name, None)
        weights = hf.iter_safetensors(source.path)
    try:
        model = assemble_decoder(cfg, weights, precision, dtype, device)
    except ValueError as e:
        raise ValueError(f"{source.path}: {e}") from e
    return LanguageModel(source.name, cfg, model, tokenizer, device, dtype, precision)


def _open_gguf(
    source: ModelSource, device: torch.device, dtype: str, quantization: str
) -> tuple[DecoderConfig, Tokenizer, Precision, Iterator[tuple[str, Weight]]]:
    """The file's config, tokenizer, precision and its weights to come. The file's
    reader goes on return (its parsed metadata is large), before any weight is read."""
    file = GGUFFile(source.path)
    cfg = file.config()
    precision = resolve_precision(quantization, device.type, dtype, file.linear_types())
    weights = file.weights(cfg, codes=precision.quantization != "none")
    return cfg, file.tokenizer(), precision, weights
