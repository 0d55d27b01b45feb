"""Attention over a paged KV cache.

A step's new tokens are flattened into one row per token (T rows), decodes
first, then each prefill chunk:

    rows:  [ d0 d1 ... d(B-1) | p0 p0 p0 p0 | p1 p1 ... ]
             one token per       chunk of      chunk of
             decoding sequence   prompt 0      prompt 1

The KV cache of one layer is a pool of slots `(num_slots, KVH, D)`; slot
`block_id * block_size + offset` holds the keys of one token. Every new token
first writes its K/V to its slot (`slot_mapping`), then attends to its
sequence's earlier slots, gathered through precomputed slot tables. Decodes are
one batched call; each prefill chunk is one call, so the Python loop runs over
prefills only, never over the decode batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(slots=True)
class PrefillSpan:
    """One sequence's prefill chunk within the flattened rows."""

    start: int  # first row of the chunk
    num_tokens: int  # rows in the chunk
    num_cached: int  # tokens of this sequence already in the cache before the chunk
    # slots of all num_cached + num_tokens positions, in order; None when
    # num_cached == 0, because then the chunk attends only to itself.
    context_slots: torch.Tensor | None


# (q, k_cache, v_cache, slots, lens, scale) -> out: decode attention read in place
DecodeKernel = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor
]


@dataclass(slots=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor  # (T,) where each new token's K/V is written
    num_decodes: int
    decode_slots: torch.Tensor | None  # (Bd, Lmax) slots of each decode's context
    decode_lens: torch.Tensor | None  # (Bd,) context length, the new token included
    decode_mask: torch.Tensor | None  # (Bd, 1, 1, Lmax) True where a slot is real
    prefills: list[PrefillSpan]
    # Native kernel for the decode rows (engine/kernels); None: gather + SDPA.
    decode_kernel: DecodeKernel | None = None


def paged_attention(
    q: torch.Tensor,  # (T, H, D)
    k: torch.Tensor,  # (T, KVH, D)
    v: torch.Tensor,  # (T, KVH, D)
    k_cache: torch.Tensor,  # (num_slots, KVH, D)
    v_cache: torch.Tensor,  # (num_slots, KVH, D)
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:  # (T, H, D)
    k_cache.index_copy_(0, meta.slot_mapping, k)
    v_cache.index_copy_(0, meta.slot_mapping, v)
    out = torch.empty_like(q)
    nd = meta.num_decodes
    if nd and meta.decode_kernel is not None:
        assert meta.decode_slots is not None and meta.decode_lens is not None
        out[:nd] = meta.decode_kernel(
            q[:nd], k_cache, v_cache, meta.decode_slots, meta.decode_lens, scale
        )
    elif nd:
        assert meta.decode_slots is not None and meta.decode_mask is not None
        qd = q[:nd].unsqueeze(2)  # (Bd, H, 1, D)
        kd = _gather(k_cache, meta.decode_slots).transpose(1, 2)  # (Bd, KVH, Lmax, D)
        vd = _gather(v_cache, meta.decode_slots).transpose(1, 2)
        od = F.scaled_dot_product_attention(
            qd, kd, vd, attn_mask=meta.decode_mask, scale=scale, enable_gqa=True
        )
        out[:nd] = od.squeeze(2)
    for span in meta.prefills:
        rows = slice(span.start, span.start + span.num_tokens)
        qp = q[rows].transpose(0, 1).unsqueeze(0)  # (1, H, n, D)
        if span.context_slots is None:
            kp = k[rows].transpose(0, 1).unsqueeze(0)  # (1, KVH, n, D)
            vp = v[rows].transpose(0, 1).unsqueeze(0)
            op = F.scaled_dot_product_attention(
                qp, kp, vp, is_causal=True, scale=scale, enable_gqa=True
            )
        else:
            kp = _gather(k_cache, span.context_slots).transpose(0, 1).unsqueeze(0)  # (1, KVH, L, D)
            vp = _gather(v_cache, span.context_slots).transpose(0, 1).unsqueeze(0)
            mask = _causal_mask(span.num_tokens, span.num_cached, q.device)
            op = F.scaled_dot_product_attention(
                qp, kp, vp, attn_mask=mask, scale=scale, enable_gqa=True
            )
        out[rows] = op.squeeze(0).transpose(0, 1)
    return out


def _gather(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """cache[slots] for a (..., ) tensor of slot ids -> (..., KVH, D). index_select on
    the flat slot axis is several times faster on CPU than advanced indexing."""
    return cache.index_select(0, slots.reshape(-1)).view(*slots.shape, *cache.shape[1:])


def _causal_mask(num_new: int, num_cached: int, device: torch.device) -> torch.Tensor:
    """(n, num_cached + n) mask: query i sees every key up to position num_cached + i."""
    q_pos = torch.arange(num_new, device=device).unsqueeze(1) + num_cached
    k_pos = torch.arange(num_cached + num_new, device=device).unsqueeze(0)
    return k_pos <= q_pos
