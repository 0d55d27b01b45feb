"""Gemma 2 and Gemma 3 (text) decoders.

Against Llama's: every RMSNorm multiplies by (1 + weight) (the checkpoints store
the weight minus one); the token embeddings are scaled by sqrt(hidden_size); each
layer is "sandwiched": x + post_attn_norm(attn(input_norm(x))), then
x + post_ffw_norm(mlp(pre_ffw_norm(x))); the MLP gates with tanh-approximated GELU;
the softmax scale is query_pre_attn_scalar ** -0.5, not head_dim ** -0.5; and layers
alternate between a sliding window (local) and every earlier key (global), as
`layer_types` lists them.

Gemma 2 soft-caps the attention logits (cap * tanh(s / cap), 50 in the released
models) and the output logits (30). Gemma 3 drops both caps and instead normalises
each head's queries and keys ((1 + weight) norms too), and gives its local layers
their own RoPE base (10,000 against the global layers' 1,000,000; RoPE scaling, where
set, applies to the global layers only).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import nn

from vigil.engine.model.attention import AttentionMetadata
from vigil.engine.model.config import (
    DecoderConfig,
    RopeConfig,
    decoder_fields,
    layer_windows,
    rope_params,
)
from vigil.engine.model.mlp import GatedMLP
from vigil.engine.model.norm import RMSNorm
from vigil.engine.model.rope import RopeTables, RotaryEmbedding
from vigil.engine.model.self_attention import SelfAttention, layer_metadata


def _gemma_fields(cfg: dict[str, Any], local_every: int) -> dict[str, Any]:
    """What Gemma 2 and 3 share. `local_every`: before `layer_types`, every layer but
    each local_every-th was local (2 for Gemma 2, `sliding_window_pattern` for 3)."""
    n = cfg["num_hidden_layers"]
    pattern = ["sliding_attention" if (i + 1) % local_every else "full_attention" for i in range(n)]
    act = cfg.get("hidden_activation") or cfg.get("hidden_act") or "gelu_pytorch_tanh"
    if act != "gelu_pytorch_tanh":
        raise ValueError(f"Gemma activation {act!r} is not supported (only gelu_pytorch_tanh)")
    return {
        "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", True)),
        "layer_windows": layer_windows(cfg, pattern),
        "query_scale": float(cfg.get("query_pre_attn_scalar") or cfg["head_dim"]) ** -0.5,
        "hidden_act": "gelu_tanh",
        "attn_softcap": cfg.get("attn_logit_softcapping"),
        "final_softcap": cfg.get("final_logit_softcapping"),
    }


def gemma2_config_from_hf(cfg: dict[str, Any]) -> DecoderConfig:
    return DecoderConfig(**(decoder_fields(cfg) | _gemma_fields(cfg, local_every=2)))


def gemma3_config_from_hf(cfg: dict[str, Any]) -> DecoderConfig:
    full = rope_params(cfg, "full_attention")
    local = rope_params(cfg, "sliding_attention")
    if "sliding_attention" not in (cfg.get("rope_parameters") or {}):
        local = {"rope_theta": cfg.get("rope_local_base_freq", 10_000.0)}
    max_position = int(cfg.get("max_position_embeddings", 131072))
    fields = decoder_fields(cfg, rope=full) | _gemma_fields(
        cfg, local_every=int(cfg.get("sliding_window_pattern", 6))
    )
    return DecoderConfig(**fields, qk_norm=True, local_rope=RopeConfig.from_hf(local, max_position))


class GemmaDecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        norm = partial(RMSNorm, cfg.hidden_size, cfg.rms_norm_eps, unit_offset=True)
        self.input_layernorm = norm()
        self.self_attn = SelfAttention(cfg, unit_offset_norms=True)
        self.post_attention_layernorm = norm()
        self.pre_feedforward_layernorm = norm()
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act)
        self.post_feedforward_layernorm = norm()

    def forward(
        self,
        x: torch.Tensor,
        rope: RopeTables,
        kv_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        attn = self.self_attn(self.input_layernorm(x), rope, kv_cache, meta)
        x = x + self.post_attention_layernorm(attn)
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class GemmaBody(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(GemmaDecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, unit_offset=True)


class GemmaForCausalLM(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = GemmaBody(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rebuild_buffers()

    def rebuild_buffers(self) -> None:
        """The RoPE tables (global, and local where the local layers have their own)."""
        cfg = self.config
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.max_position, cfg.rope)
        self.local_rope = None
        if cfg.local_rope is not None:
            self.local_rope = RotaryEmbedding(cfg.head_dim, cfg.max_position, cfg.local_rope)

    def forward(
        self,
        input_ids: torch.Tensor,  # (T,)
        positions: torch.Tensor,  # (T,)
        kv_caches: torch.Tensor,  # (layers, 2, num_slots, KVH, D)
        meta: AttentionMetadata,
    ) -> torch.Tensor:  # (T, hidden), after the final norm
        x = self.model.embed_tokens(input_ids)
        # sqrt(hidden) rounded to the model's dtype first, as transformers does
        x = x * torch.tensor(self.config.hidden_size**0.5, dtype=x.dtype)
        rope = self.rope.tables(positions, x.dtype)
        local = rope if self.local_rope is None else self.local_rope.tables(positions, x.dtype)
        metas = layer_metadata(self.config, meta)
        for i, layer in enumerate(self.model.layers):
            tables = rope if self.config.window(i) is None else local
            x = layer(x, tables, kv_caches[i], metas[i])
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(N, hidden) -> (N, vocab) in float32, soft-capped where the family caps."""
        logits = self.lm_head(hidden).float()
        cap = self.config.final_softcap
        return logits if cap is None else torch.tanh(logits / cap) * cap
