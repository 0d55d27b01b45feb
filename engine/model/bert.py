"""BERT encoder: learned absolute positions, bidirectional attention, post-LayerNorm.

Parameter names follow Hugging Face's `BertModel` (including the odd ones:
`LayerNorm` in capitals, an attention submodule called `self`) so that a
safetensors checkpoint loads by name. Inference only: no dropout, no pooler
(sentence embeddings pool the last hidden state instead). RoBERTa and XLM-R are this
encoder with their positions counted from padding_idx + 1 (BertConfig.position_offset)
and one token type.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vigil.engine.model.config import BertConfig


class BertEmbeddings(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.position_offset = cfg.position_offset

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        t, offset = input_ids.shape[1], self.position_offset
        # Right padding keeps every real token at positions 0..len-1 (from the offset),
        # so one arange serves the whole batch.
        positions = torch.arange(offset, offset + t, device=input_ids.device)  # (T,)
        x = self.word_embeddings(input_ids)  # (B, T, C)
        x = x + self.position_embeddings(positions)  # (T, C) broadcast over B
        # Single-segment inputs only: every token has type 0.
        x = x + self.token_type_embeddings.weight[0]  # (C,)
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        assert cfg.hidden_size % cfg.num_heads == 0, "hidden_size must divide into heads"
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, C)
        attn_mask: torch.Tensor | None,  # (B, 1, 1, T) bool, True = attend; None = no padding
    ) -> torch.Tensor:
        b, t, c = x.shape
        q = self.query(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = self.key(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        v = self.value(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        # Bidirectional: no causal mask, only the padding keys are hidden.
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # (B, H, T, D)
        return y.transpose(1, 2).reshape(b, t, c)  # (B, T, C)


class DenseAddNorm(nn.Module):
    """Projection, residual add, then LayerNorm (BERT normalises after the residual).

    HF calls this `BertSelfOutput` after attention and `BertOutput` after the FFN;
    both hold exactly `dense` and `LayerNorm`.
    """

    def __init__(self, in_features: int, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        # h: (B, T, in_features), residual: (B, T, C)
        return self.LayerNorm(self.dense(h) + residual)  # (B, T, C)


class BertAttention(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        # `self.self` mirrors the checkpoint's `attention.self.query` names.
        self.self = BertSelfAttention(cfg)
        self.output = DenseAddNorm(cfg.hidden_size, cfg)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        return self.output(self.self(x, attn_mask), x)  # (B, T, C)


class BertIntermediate(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The exact (erf) GELU: HF's "gelu", not the tanh approximation.
        return F.gelu(self.dense(x))  # (B, T, F)


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = BertIntermediate(cfg)
        self.output = DenseAddNorm(cfg.intermediate_size, cfg)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        x = self.attention(x, attn_mask)  # (B, T, C)
        return self.output(self.intermediate(x), x)  # (B, T, C)


class BertEncoder(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_layers))

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x, attn_mask)
        return x


class BertModel(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = BertEncoder(cfg)

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T) right-padded
        attention_mask: torch.Tensor,  # (B, T) 1 = real token, 0 = padding
    ) -> torch.Tensor:
        assert input_ids.shape == attention_mask.shape, "input_ids and attention_mask differ"
        assert input_ids.shape[1] <= self.config.max_tokens, "sequence longer than positions"
        keep = attention_mask.bool()
        # Without padding, pass no mask at all: SDPA can then use its fused kernels.
        attn_mask = None if bool(keep.all()) else keep[:, None, None, :]  # (B, 1, 1, T)
        x = self.embeddings(input_ids)  # (B, T, C)
        return self.encoder(x, attn_mask)  # (B, T, C) last hidden state
