"""The self-attention block every decoder here shares, over the paged KV cache.

q, k and v are one `qkv_proj` (one matmul instead of three, which matters at the
small batch sizes of decoding), with a bias where the family has one (Qwen2). Where
the family normalises each head's queries and keys (Qwen3, Gemma 3) that happens
before RoPE; where it soft-caps the attention logits (Gemma 2) paged_attention does.
Which layers slide is the metadata the model passes each layer (attention.windowed).
"""

from __future__ import annotations

import torch
from torch import nn

from vigil.engine.model.attention import AttentionMetadata, paged_attention, windowed
from vigil.engine.model.config import DecoderConfig
from vigil.engine.model.norm import RMSNorm
from vigil.engine.model.rope import RopeTables, apply_rope


class SelfAttention(nn.Module):
    def __init__(self, cfg: DecoderConfig, unit_offset_norms: bool = False) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        self.scale = cfg.query_scale if cfg.query_scale is not None else cfg.head_dim**-0.5
        self.softcap = cfg.attn_softcap
        qkv_heads = cfg.num_heads + 2 * cfg.num_kv_heads
        self.qkv_proj = nn.Linear(cfg.hidden_size, qkv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=cfg.o_proj_bias)
        self.q_norm: RMSNorm | None = None
        self.k_norm: RMSNorm | None = None
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, unit_offset_norms)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, unit_offset_norms)

    def forward(
        self,
        x: torch.Tensor,  # (T, hidden)
        rope: RopeTables,  # this step's positions
        kv_cache: torch.Tensor,  # (2, num_slots, KVH, D)
        meta: AttentionMetadata,  # this layer's: windowed where it slides
    ) -> torch.Tensor:
        t = x.shape[0]
        h, kvh = self.num_heads, self.num_kv_heads
        qkv = self.qkv_proj(x).view(t, h + 2 * kvh, self.head_dim)
        qk = qkv[:, : h + kvh]  # (T, H + KVH, D)
        if self.q_norm is not None and self.k_norm is not None:
            qk = torch.cat((self.q_norm(qk[:, :h]), self.k_norm(qk[:, h:])), dim=1)
        qk = apply_rope(qk, rope)  # one rotation for queries and keys
        q, k, v = qk[:, :h], qk[:, h:], qkv[:, h + kvh :]
        out = paged_attention(q, k, v, kv_cache[0], kv_cache[1], meta, self.scale, self.softcap)
        return self.o_proj(out.reshape(t, h * self.head_dim))


def layer_metadata(cfg: DecoderConfig, meta: AttentionMetadata) -> list[AttentionMetadata]:
    """Each layer's metadata: the step's own, or its window's (derived once a step)."""
    by_window = {w: windowed(meta, w) for w in set(cfg.layer_windows) if w is not None}
    return [meta if (w := cfg.window(i)) is None else by_window[w] for i in range(cfg.num_layers)]
