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

A sliding-window layer (Mistral, Gemma's local layers) lets each query see itself
and the window - 1 keys before it. `windowed` derives that layer's metadata from the
step's, once a step: each decode's slot table trimmed to its last `window` slots
(so the native kernel reads no more than the window), each prefill chunk's context
cut where its first query stops seeing, and a mask for the rest of the band.
Attention-logit soft-capping (Gemma 2) is not something SDPA or the native kernel
do: those layers attend through `_attend_softcapped`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F


@dataclass(slots=True)
class PrefillSpan:
    """One sequence's prefill chunk within the flattened rows."""

    start: int  # first row of the chunk
    num_tokens: int  # rows in the chunk
    num_cached: int  # tokens of this sequence already in the cache before the chunk
    # slots of positions first_position .. num_cached + num_tokens - 1, in order;
    # None when num_cached == 0, because then the chunk attends only to itself.
    context_slots: torch.Tensor | None
    first_position: int = 0  # a window cuts the context's start: its first position
    window: int | None = None  # keys a query sees, itself included; None: all before it


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
    softcap: float | None = None,
) -> torch.Tensor:  # (T, H, D)
    k_cache.index_copy_(0, meta.slot_mapping, k)
    v_cache.index_copy_(0, meta.slot_mapping, v)
    out = torch.empty_like(q)
    nd = meta.num_decodes
    if softcap is not None:
        attend = partial(_attend_softcapped, softcap=softcap)
    else:
        attend = partial(F.scaled_dot_product_attention, enable_gqa=True)
    if nd and meta.decode_kernel is not None and softcap is None:
        assert meta.decode_slots is not None and meta.decode_lens is not None
        out[:nd] = meta.decode_kernel(
            q[:nd], k_cache, v_cache, meta.decode_slots, meta.decode_lens, scale
        )
    elif nd:
        assert meta.decode_slots is not None and meta.decode_lens is not None
        qd = q[:nd].unsqueeze(2)  # (Bd, H, 1, D)
        kd = _gather(k_cache, meta.decode_slots).transpose(1, 2)  # (Bd, KVH, Lmax, D)
        vd = _gather(v_cache, meta.decode_slots).transpose(1, 2)
        mask = meta.decode_mask  # None where the runner meant the native kernel to read
        if mask is None:
            mask = _length_mask(meta.decode_slots.shape[1], meta.decode_lens)
        od = attend(qd, kd, vd, attn_mask=mask, scale=scale)
        out[:nd] = od.squeeze(2)
    for span in meta.prefills:
        rows = slice(span.start, span.start + span.num_tokens)
        qp = q[rows].transpose(0, 1).unsqueeze(0)  # (1, H, n, D)
        plain_causal = span.window is None or span.num_cached + span.num_tokens <= span.window
        if span.context_slots is None:
            kp = k[rows].transpose(0, 1).unsqueeze(0)  # (1, KVH, n, D)
            vp = v[rows].transpose(0, 1).unsqueeze(0)
        else:
            kp = _gather(k_cache, span.context_slots).transpose(0, 1).unsqueeze(0)  # (1, KVH, L, D)
            vp = _gather(v_cache, span.context_slots).transpose(0, 1).unsqueeze(0)
        if span.context_slots is None and plain_causal and softcap is None:
            op = F.scaled_dot_product_attention(
                qp, kp, vp, is_causal=True, scale=scale, enable_gqa=True
            )
        else:
            mask = _causal_mask(span, q.device)
            op = attend(qp, kp, vp, attn_mask=mask, scale=scale)
        out[rows] = op.squeeze(0).transpose(0, 1)
    return out


def windowed(meta: AttentionMetadata, window: int) -> AttentionMetadata:
    """The step's metadata for a layer whose queries see `window` keys, themselves
    included: the same writes, each decode's context cut to its last `window` slots."""
    slots, lens, mask = meta.decode_slots, meta.decode_lens, meta.decode_mask
    if slots is not None and lens is not None:
        kept = lens.clamp(max=window)  # (Bd,)
        width = min(window, slots.shape[1])
        offsets = torch.arange(width, device=slots.device)
        index = ((lens - kept).unsqueeze(1) + offsets).clamp(max=slots.shape[1] - 1)
        slots = slots.gather(1, index)  # (Bd, width): positions lens - kept .. lens - 1
        lens = kept
        if mask is not None:
            mask = _length_mask(width, kept)
    prefills = []
    for span in meta.prefills:
        context, first = span.context_slots, span.first_position
        if context is not None:
            # The chunk's first query (position num_cached) sees back to this position.
            cut = max(0, span.num_cached - window + 1 - first)
            context, first = context[cut:], first + cut
        prefills.append(
            PrefillSpan(span.start, span.num_tokens, span.num_cached, context, first, window)
        )
    return AttentionMetadata(
        meta.slot_mapping, meta.num_decodes, slots, lens, mask, prefills, meta.decode_kernel
    )


def _attend_softcapped(
    q: torch.Tensor,  # (B, H, n, D)
    k: torch.Tensor,  # (B, KVH, L, D)
    v: torch.Tensor,  # (B, KVH, L, D)
    *,
    scale: float,
    softcap: float,
    attn_mask: torch.Tensor,  # broadcast to (B, H, n, L); True: attend
) -> torch.Tensor:  # (B, H, n, D)
    """Attention with the logits soft-capped before the mask: cap * tanh(s / cap)."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = torch.tanh(q @ k.transpose(-1, -2) * (scale / softcap)) * softcap
    scores = scores.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v


def _gather(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """cache[slots] for a (..., ) tensor of slot ids -> (..., KVH, D). index_select on
    the flat slot axis is several times faster on CPU than advanced indexing."""
    return cache.index_select(0, slots.reshape(-1)).view(*slots.shape, *cache.shape[1:])


def _length_mask(width: int, lens: torch.Tensor) -> torch.Tensor:
    """(Bd, 1, 1, width): True at the first lens[b] entries of row b."""
    return (torch.arange(width, device=lens.device).unsqueeze(0) < lens.unsqueeze(1))[
        :, None, None, :
    ]


def _causal_mask(span: PrefillSpan, device: torch.device) -> torch.Tensor:
    """(n, L) mask over the span's keys (positions first_position .. num_cached + n - 1):
    query i, at position num_cached + i, sees every key up to itself, and no key
    `window` or more before it."""
    q_pos = torch.arange(span.num_tokens, device=device).unsqueeze(1) + span.num_cached
    first = span.first_position if span.context_slots is not None else span.num_cached
    k_pos = torch.arange(first, span.num_cached + span.num_tokens, device=device).unsqueeze(0)
    mask = k_pos <= q_pos
    if span.window is not None:
        mask &= k_pos > q_pos - span.window
    return mask
