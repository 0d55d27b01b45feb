"""One vector a text from an encoder's last hidden states, as sentence-transformers'
Pooling module computes it."""

from __future__ import annotations

import torch

from vigil.engine.model.config import Pooling


def pool(
    hidden: torch.Tensor,  # (N, T, C) float32
    mask: torch.Tensor,  # (N, T), 1 = real token; right-padded
    pooling: Pooling,
) -> torch.Tensor:  # (N, C)
    if pooling is Pooling.CLS:
        return hidden[:, 0]
    if pooling is Pooling.LAST:
        last = (mask.sum(dim=1) - 1).clamp(min=0)  # (N,): right padding, so length - 1
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    weights = mask.to(hidden.dtype).unsqueeze(-1)  # (N, T, 1)
    # Sum over real tokens only; padded positions hold garbage that must not leak in.
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
