"""Architecture hyper-parameters, read from a model's own files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Weight-only quantizations of a decoder (model.quantized); "none" keeps --dtype's.
QUANTIZATIONS = ("none", "int4")


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    max_position: int
    tie_word_embeddings: bool

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> LlamaConfig:
        """From a Hugging Face `config.json` of a Llama-family model."""
        num_heads = cfg["num_attention_heads"]
        # transformers >= 5 writes rope_theta inside `rope_parameters`; older
        # versions write it at the top level.
        rope = cfg.get("rope_parameters") or {}
        rope_theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        scaling = cfg.get("rope_scaling") or rope
        rope_type = scaling.get("rope_type") or scaling.get("type") or "default"
        if rope_type != "default":
            # Scaled RoPE (llama3, yarn, ...) would load and then answer garbage.
            raise ValueError(f"RoPE scaling {rope_type!r} is not supported (only default)")
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=cfg.get("num_key_value_heads") or num_heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // num_heads,
            rope_theta=float(rope_theta),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            max_position=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        )


@dataclass(frozen=True, slots=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    max_position: int
    type_vocab_size: int
    layer_norm_eps: float

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> BertConfig:
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=cfg["num_attention_heads"],
            max_position=cfg["max_position_embeddings"],
            type_vocab_size=cfg.get("type_vocab_size", 2),
            layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
        )
