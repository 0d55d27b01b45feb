"""Llama-family decoder: RMSNorm, rotary positions, grouped-query attention, SwiGLU.

Mistral, Qwen2/2.5, Qwen3 and Phi-3 are this decoder too, with the differences their
configs name (their own files read them): Mistral's sliding window, Qwen2's q/k/v
biases, Qwen3's per-head q/k norms, Phi-3's projections already fused in the
checkpoint. Each layer is pre-norm: x + attn(norm(x)), then x + mlp(norm(x)).

Parameter names follow Hugging Face's `LlamaForCausalLM`, except that the q/k/v
projections are one `qkv_proj` and gate/up one `gate_up_proj` (self_attention.py,
mlp.py); loaders/assembly.py fuses a checkpoint's as it reads them, and the GGUF
loader renames its tensors to Hugging Face's names first. RoPE is the
rotate-half form (the GGUF loader undoes llama.cpp's row permutation).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn

from vigil.engine.model.attention import AttentionMetadata
from vigil.engine.model.config import DecoderConfig, decoder_fields
from vigil.engine.model.mlp import GatedMLP
from vigil.engine.model.norm import RMSNorm
from vigil.engine.model.rope import RopeTables, RotaryEmbedding
from vigil.engine.model.self_attention import SelfAttention, layer_metadata


def config_from_hf(cfg: dict[str, Any]) -> DecoderConfig:
    """From a Hugging Face `config.json` of a Llama model."""
    bias = bool(cfg.get("attention_bias", False))
    return DecoderConfig(**decoder_fields(cfg), qkv_bias=bias, o_proj_bias=bias)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = SelfAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act)

    def forward(
        self,
        x: torch.Tensor,
        rope: RopeTables,
        kv_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, kv_cache, meta)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class DecodeLayers(Protocol):
    """A faster path through every decoder layer, for the steps it `takes`."""

    def takes(self, x: torch.Tensor, kv_caches: torch.Tensor, meta: AttentionMetadata) -> bool: ...

    def __call__(
        self, x: torch.Tensor, rope: RopeTables, kv_caches: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor: ...


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = LlamaBody(cfg)
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.max_position, cfg.rope)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.decode_layers: DecodeLayers | None = None  # set by a quantization

    def forward(
        self,
        input_ids: torch.Tensor,  # (T,)
        positions: torch.Tensor,  # (T,)
        kv_caches: torch.Tensor,  # (layers, 2, num_slots, KVH, D)
        meta: AttentionMetadata,
    ) -> torch.Tensor:  # (T, hidden), after the final norm
        x = self.model.embed_tokens(input_ids)
        rope = self.rope.tables(positions, x.dtype)
        if self.decode_layers is not None and self.decode_layers.takes(x, kv_caches, meta):
            return self.model.norm(self.decode_layers(x, rope, kv_caches, meta))
        metas = layer_metadata(self.config, meta)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, rope, kv_caches[i], metas[i])
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(N, hidden) -> (N, vocab) in float32; only the rows that sample pay for it."""
        return self.lm_head(hidden).float()

    def rebuild_buffers(self) -> None:
        """The RoPE tables, which a build on the meta device leaves empty."""
        cfg = self.config
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.max_position, cfg.rope)
