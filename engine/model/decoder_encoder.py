"""A decoder (Qwen2, Llama, ... model/families.py) as an embedder's encoder: the last
hidden states, after the final norm, of a padded batch of texts, as transformers'
`Qwen2Model` gives them to sentence-transformers.

Each text is its own causal prefill, and the batch one forward over all their real
tokens (no padding computed), flattened as the engine's steps are (attention.py). The
KV cache is written by every layer and never read: a fresh sequence's prefill attends
to its own new keys. So one slot takes every write, and no cache is held for a batch.
"""

from __future__ import annotations

import torch
from torch import nn

from vigil.engine.model.attention import AttentionMetadata, PrefillSpan
from vigil.engine.model.families import CausalLM


class DecoderEncoder(nn.Module):
    def __init__(self, decoder: CausalLM) -> None:
        super().__init__()
        self.decoder = decoder
        cfg, dtype = decoder.config, decoder.model.norm.weight.dtype
        shape = (cfg.num_layers, 2, 1, cfg.num_kv_heads, cfg.head_dim)
        self.register_buffer("scratch", torch.zeros(shape, dtype=dtype))

    def forward(
        self,
        input_ids: torch.Tensor,  # (N, T) right-padded
        attention_mask: torch.Tensor,  # (N, T) 1 = real token
    ) -> torch.Tensor:  # (N, T, C); padded positions are zeros
        lens = attention_mask.sum(dim=1).tolist()
        real = attention_mask.bool()
        ids = input_ids[real]  # (R,) every real token, row after row
        positions = torch.cat([torch.arange(n, device=ids.device) for n in lens])
        spans, start = [], 0
        for n in lens:
            spans.append(PrefillSpan(start, n, 0, None))
            start += n
        slots = torch.zeros(len(ids), dtype=torch.long, device=ids.device)
        meta = AttentionMetadata(slots, 0, None, None, None, spans)
        hidden = self.decoder(ids, positions, self.scratch, meta)  # (R, C)
        out = hidden.new_zeros(*input_ids.shape, hidden.shape[-1])
        out[real] = hidden
        return out
