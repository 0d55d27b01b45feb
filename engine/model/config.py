"""Architecture hyper-parameters, read from a model's own files.

A decoder family's `config_from_hf` (model/llama.py, qwen2.py, ...) reads the fields
every decoder shares through `decoder_fields` and adds what is its own; what no
family here implements is refused at load rather than served wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# The decoder families Vigil runs, by Hugging Face `model_type` (model/families.py).
DECODER_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text")

# Weight-only quantizations of a decoder (model.quantized); "none" keeps --dtype's;
# "auto" follows the model's own weights on this device (engine/precision.py).
QUANTIZATIONS = ("none", "int4", "int8", "auto")

# The RoPE variants model/rope.py computes, as Hugging Face configs name them.
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")


@dataclass(frozen=True, slots=True)
class RopeConfig:
    """One rotary embedding's frequencies: a base and, where set, its scaling."""

    theta: float
    type: str = "default"
    factor: float = 1.0
    # the context the model was pre-trained at (llama3, yarn)
    original_max_position: int | None = None
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    attention_factor: float | None = None  # yarn: cos/sin scale; None: from factor
    mscale: float | None = None  # yarn
    mscale_all_dim: float | None = None  # yarn
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    truncate: bool = True  # yarn
    # Per frequency, what it is divided by: how a GGUF file carries llama3 scaling
    # (its `rope_freqs` tensor); None: none.
    frequency_divisors: tuple[float, ...] | None = None

    @classmethod
    def from_hf(cls, params: dict[str, Any], max_position: int) -> RopeConfig:
        """From one `rope_parameters` (transformers >= 5) or `rope_scaling` dict, with
        `rope_theta` folded in."""
        rope_type = params.get("rope_type") or params.get("type") or "default"
        if rope_type not in ROPE_TYPES:
            # longrope, and anything newer, would load and then answer garbage.
            raise ValueError(
                f"RoPE scaling {rope_type!r} is not supported ({', '.join(ROPE_TYPES)})"
            )
        if float(params.get("partial_rotary_factor") or 1.0) != 1.0:
            raise ValueError(
                "partial rotary embeddings (partial_rotary_factor < 1) are not supported"
            )

        def number(key: str, default: float | None) -> float | None:
            value = params.get(key)
            return default if value is None else float(value)

        original = params.get("original_max_position_embeddings") or max_position
        return cls(
            theta=float(params.get("rope_theta") or 10000.0),
            type=rope_type,
            factor=number("factor", 1.0) or 1.0,
            original_max_position=int(original),
            low_freq_factor=number("low_freq_factor", 1.0) or 1.0,
            high_freq_factor=number("high_freq_factor", 4.0) or 4.0,
            attention_factor=number("attention_factor", None),
            mscale=number("mscale", None),
            mscale_all_dim=number("mscale_all_dim", None),
            beta_fast=number("beta_fast", 32.0) or 32.0,
            beta_slow=number("beta_slow", 1.0) or 1.0,
            truncate=bool(params.get("truncate", True)),
        )


@dataclass(frozen=True, slots=True)
class DecoderConfig:
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
    architecture: str = "llama"  # the Hugging Face model_type: which family builds it
    rope_scaling: RopeConfig | None = None  # None: plain RoPE at rope_theta
    # Sliding-window layers' own RoPE (Gemma 3's local base); None: the one above.
    local_rope: RopeConfig | None = None
    qkv_bias: bool = False
    o_proj_bias: bool = False
    qk_norm: bool = False  # an RMSNorm over each head's queries and keys, before RoPE
    # Per layer, the keys a query sees (itself and the window - 1 before it), or None:
    # every earlier key. Empty: no layer slides.
    layer_windows: tuple[int | None, ...] = ()
    attn_softcap: float | None = None  # attention logits -> cap * tanh(logits / cap)
    final_softcap: float | None = None  # output logits, likewise
    query_scale: float | None = None  # softmax scale; None: head_dim ** -0.5
    hidden_act: str = "silu"  # of the gated MLP: silu or gelu_tanh

    def window(self, layer: int) -> int | None:
        return self.layer_windows[layer] if self.layer_windows else None

    @property
    def every_layer_window(self) -> int | None:
        """The window, where every layer has the same one: then blocks that slid out
        of it can be given back (scheduler.py); None where any layer sees all."""
        windows = set(self.layer_windows)
        if len(windows) == 1 and None not in windows:
            return next(iter(windows))
        return None

    @property
    def rope(self) -> RopeConfig:
        return self.rope_scaling or RopeConfig(self.rope_theta)


def rope_params(cfg: dict[str, Any], layer_type: str | None = None) -> dict[str, Any]:
    """The RoPE parameters of a config, `rope_theta` included, whichever way it was
    written: transformers >= 5 nests them in `rope_parameters` (per layer type for
    Gemma 3), older versions write `rope_theta` and `rope_scaling` at the top level."""
    params = dict(cfg.get("rope_parameters") or {})
    if layer_type is not None and isinstance(params.get(layer_type), dict):
        params = dict(params[layer_type])
    if layer_type in (None, "full_attention"):  # Gemma 3 scales its global layers only
        params.update(cfg.get("rope_scaling") or {})
    if params.get("rope_theta") is None:
        params["rope_theta"] = cfg.get("rope_theta", 10000.0)
    if "original_max_position_embeddings" in cfg:  # Phi-3 writes it at the top level
        params.setdefault(
            "original_max_position_embeddings", cfg["original_max_position_embeddings"]
        )
    return params


def decoder_fields(cfg: dict[str, Any], rope: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fields every decoder's `config.json` writes the same way."""
    num_heads = cfg["num_attention_heads"]
    max_position = int(cfg.get("max_position_embeddings", 2048))
    scaling = RopeConfig.from_hf(rope_params(cfg) if rope is None else rope, max_position)
    return {
        "architecture": cfg.get("model_type", "llama"),
        "vocab_size": cfg["vocab_size"],
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_layers": cfg["num_hidden_layers"],
        "num_heads": num_heads,
        "num_kv_heads": cfg.get("num_key_value_heads") or num_heads,
        "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // num_heads,
        "rope_theta": scaling.theta,
        "rope_scaling": None if scaling.type == "default" else scaling,
        "rms_norm_eps": float(cfg.get("rms_norm_eps", 1e-6)),
        "max_position": max_position,
        "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
    }


def every_layer_window(cfg: dict[str, Any]) -> tuple[int | None, ...]:
    """`sliding_window` on every layer where set (Mistral's and Phi-3's rule)."""
    window = cfg.get("sliding_window")
    return () if window is None else (int(window),) * cfg["num_hidden_layers"]


def layer_windows(cfg: dict[str, Any], default_types: list[str]) -> tuple[int | None, ...]:
    """Per layer, `sliding_window` where the layer's type is sliding_attention.
    `default_types`: the family's pattern, for configs written before `layer_types`."""
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types") or default_types
    if window is None or "sliding_attention" not in types:
        return ()
    if len(types) != cfg["num_hidden_layers"]:
        raise ValueError(
            f"layer_types has {len(types)} entries for {cfg['num_hidden_layers']} layers"
        )
    return tuple(int(window) if t == "sliding_attention" else None for t in types)


# The BERT-family encoders model/bert.py runs, by Hugging Face `model_type`.
BERT_FAMILY = ("bert", "roberta", "xlm-roberta")


class Pooling(StrEnum):
    """How an embedder makes one vector of a text's last hidden states (model/pooling.py)."""

    MEAN = "mean"  # average of the real tokens' last hidden states
    CLS = "cls"  # the first token's (BERT's [CLS], RoBERTa's <s>)
    LAST = "lasttoken"  # the last real token's: decoder embedders, whose last token saw all


@dataclass(frozen=True, slots=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    max_position: int  # rows of the position table
    type_vocab_size: int
    layer_norm_eps: float
    # Position of the first token in the table: RoBERTa and XLM-R count positions from
    # padding_idx + 1 (their table's first rows belong to padding); BERT from 0.
    position_offset: int = 0

    @property
    def max_tokens(self) -> int:
        return self.max_position - self.position_offset

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> BertConfig:
        roberta = cfg.get("model_type") in ("roberta", "xlm-roberta")
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=cfg["num_attention_heads"],
            max_position=cfg["max_position_embeddings"],
            type_vocab_size=cfg.get("type_vocab_size", 2),
            layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
            position_offset=int(cfg.get("pad_token_id") or 0) + 1 if roberta else 0,
        )
