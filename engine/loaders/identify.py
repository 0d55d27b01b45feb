"""What a model path holds, from the model's own files: its format and its kind
(generate or embed), or why Vigil cannot serve it, naming the path and what is not
supported. Headers and JSON only: no weights are read and torch is not imported, so a
gateway can ask before a worker loads anything.

    a GGUF file                     generate, where `general.architecture` is one the
                                    GGUF loader maps and its tokenizer one it builds
    a folder with modules.json      embed: a sentence-transformers folder, over a
                                    BERT-family encoder or a decoder family
    a folder with config.json       generate, where `model_type` is a decoder family
                                    and the checkpoint has its language-model head

The loaders (loaders/llm.py for generate, loaders/embedder.py for embed) then read it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.engine.loaders.gguf_architectures import MODEL_TYPES
from vigil.engine.loaders.gguf_tokenizer import TOKENIZER_MODELS
from vigil.engine.loaders.sentence_transformers import read_pipeline
from vigil.engine.model.config import BERT_FAMILY, DECODER_TYPES

_GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True, slots=True)
class ModelFiles:
    kind: ModelKind
    format: ModelFormat
    architecture: str  # the GGUF's general.architecture, or the folder's model_type


def identify(path: Path) -> ModelFiles:
    """The path's kind and format, or ValueError naming the path and why not."""
    if path.is_file():
        return _gguf(path)
    if path.is_dir():
        return _folder(path)
    raise ValueError(f"{path}: no such file or folder")


def _gguf(path: Path) -> ModelFiles:
    with path.open("rb") as f:
        if f.read(4) != _GGUF_MAGIC:
            raise ValueError(
                f"{path}: not a GGUF file (a model is a .gguf file, or a Hugging Face "
                "folder with config.json)"
            )
    from vigil.engine.loaders.gguf import GGUFFile  # its reader parses the whole header

    file = GGUFFile(path)  # refuses an architecture it does not map, naming the file
    tokenizer = file.field("tokenizer.ggml.model")
    if tokenizer not in TOKENIZER_MODELS:
        raise ValueError(
            f"{path.name}: tokenizer {tokenizer!r} is not supported ({', '.join(TOKENIZER_MODELS)})"
        )
    return ModelFiles(ModelKind.GENERATE, ModelFormat.GGUF, file.arch)


def _folder(path: Path) -> ModelFiles:
    config = _config(path)
    model_type = str(config.get("model_type"))
    if not any(path.glob("*.safetensors")):
        raise ValueError(
            f"{path}: no *.safetensors weights (other formats, such as pytorch_model.bin, "
            "are not read: save the model with safetensors)"
        )
    if not (path / "tokenizer.json").is_file():
        raise ValueError(f"{path}: no tokenizer.json (the tokenizer is read from it)")
    if (path / "modules.json").is_file():
        if model_type not in BERT_FAMILY and model_type not in DECODER_TYPES:
            raise ValueError(
                f"{path}: model_type {model_type!r} is not supported for embeddings "
                f"({', '.join((*BERT_FAMILY, *DECODER_TYPES))})"
            )
        read_pipeline(path, int(config["hidden_size"]))  # refuses what it cannot pool
        return ModelFiles(ModelKind.EMBED, ModelFormat.HF, model_type)
    if model_type in BERT_FAMILY:
        raise ValueError(
            f"{path}: a {model_type} encoder without sentence-transformers' modules.json: "
            "how to pool it is not said (save it with sentence-transformers)"
        )
    if model_type not in DECODER_TYPES:
        supported = ", ".join((*DECODER_TYPES, *(f"{t} (GGUF)" for t in MODEL_TYPES)))
        raise ValueError(
            f"{path}: model_type {model_type!r} is not supported for generation ({supported})"
        )
    heads = [a for a in config.get("architectures") or [] if a.endswith("ForCausalLM")]
    if config.get("architectures") and not heads and not config.get("tie_word_embeddings"):
        raise ValueError(
            f"{path}: {config['architectures']} has no language-model head to generate "
            "with (an embedding backbone? it embeds with sentence-transformers' modules.json)"
        )
    return ModelFiles(ModelKind.GENERATE, ModelFormat.HF, model_type)


def _config(path: Path) -> dict[str, Any]:
    file = path / "config.json"
    if not file.is_file():
        raise ValueError(
            f"{path}: no config.json (a model folder is a Hugging Face checkpoint: "
            "config.json, *.safetensors, tokenizer.json)"
        )
    config: dict[str, Any] = json.loads(file.read_text())
    return config
