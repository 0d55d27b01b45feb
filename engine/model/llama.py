"""Llama-family decoder: RMSNorm, rotary positions, grouped-query attention, SwiGLU.

Parameter names follow Hugging Face's `LlamaForCausalLM`, except that the q/k/v
projections are one `qkv_proj` and gate/up one `gate_up_proj`: one matmul
instead of three (two), which matters at the small batch sizes of decoding.
`fuse_projections` turns a Hugging Face state dict into this layout; the GGUF
loader renames its tensors to Hugging Face's names first. RoPE is the
rotate-half form (the GGUF loader undoes llama.cpp's row permutation).
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from vigil.engine.model.attention import AttentionMetadata, paged_attention
from vigil.engine.model.config import LlamaConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # no conversions to dispatch: 61 norms a step
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        # Normalised in float32 whatever the model dtype, as Hugging Face does.
        out = F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps)
        return out.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Precomputed cos/sin tables, indexed by absolute position.

    Rotate-half RoPE is x * cos + cat(-x2, x1) * sin. With the sign folded into the
    table (sin_signed = cat(-sin1, sin2)) the rotation is one roll of x by D/2:
    cat(x2, x1) * sin_signed, the same products, so float32 results are unchanged.
    """

    cos: torch.Tensor
    sin_signed: torch.Tensor

    def __init__(self, head_dim: int, max_position: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        t = torch.arange(max_position, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)  # (P, D/2)
        emb = torch.cat([freqs, freqs], dim=-1)  # (P, D)
        sign = torch.cat([-torch.ones(head_dim // 2), torch.ones(head_dim // 2)])  # (D,)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin_signed", emb.sin() * sign, persistent=False)

    def tables(self, positions: torch.Tensor, dtype: torch.dtype) -> RopeTables:
        """The step's (T, 1, D) cos and signed sin, gathered once for every layer."""
        cos = self.cos[positions].unsqueeze(1).to(dtype)
        sin = self.sin_signed[positions].unsqueeze(1).to(dtype)
        return cos, sin


RopeTables = tuple[torch.Tensor, torch.Tensor]


def apply_rope(x: torch.Tensor, rope: RopeTables) -> torch.Tensor:
    # x: (T, heads, D) -- queries and keys together
    cos, sin_signed = rope
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin_signed


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        self.scale = cfg.head_dim**-0.5
        qkv_heads = cfg.num_heads + 2 * cfg.num_kv_heads
        self.qkv_proj = nn.Linear(cfg.hidden_size, qkv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)

    def forward(
        self,
        x: torch.Tensor,  # (T, hidden)
        rope: RopeTables,  # this step's positions
        kv_cache: torch.Tensor,  # (2, num_slots, KVH, D)
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        t = x.shape[0]
        h, kvh = self.num_heads, self.num_kv_heads
        qkv = self.qkv_proj(x).view(t, h + 2 * kvh, self.head_dim)
        qk = apply_rope(qkv[:, : h + kvh], rope)  # (T, H + KVH, D): one rotation for both
        q, k, v = qk[:, :h], qk[:, h:], qkv[:, h + kvh :]
        out = paged_attention(q, k, v, kv_cache[0], kv_cache[1], meta, self.scale)
        return self.o_proj(out.reshape(t, self.num_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

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
    def __init__(self, cfg: LlamaConfig) -> None:
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
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = LlamaBody(cfg)
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.max_position, cfg.rope_theta)
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
        for i, layer in enumerate(self.model.layers):
            x = layer(x, rope, kv_caches[i], meta)
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(N, hidden) -> (N, vocab) in float32; only the rows that sample pay for it."""
        return self.lm_head(hidden).float()


def fuse_projections(weights: dict[str, torch.Tensor], num_layers: int) -> None:
    """Hugging Face layout -> ours, in place: q/k/v rows stacked into qkv_proj,
    gate/up rows into gate_up_proj."""
    for i in range(num_layers):
        attn, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        parts = [weights.pop(f"{attn}{n}_proj.weight") for n in ("q", "k", "v")]
        weights[f"{attn}qkv_proj.weight"] = torch.cat(parts)
        parts = [weights.pop(f"{mlp}{n}_proj.weight") for n in ("gate", "up")]
        weights[f"{mlp}gate_up_proj.weight"] = torch.cat(parts)
