"""RMSNorm, as the decoders here use it: Llama's `weight * x`, or Gemma's
`(1 + weight) * x` (`unit_offset`, whose checkpoints store the weight minus one)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, unit_offset: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.unit_offset = unit_offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = 1.0 + self.weight.float() if self.unit_offset else self.weight
        if x.dtype == torch.float32:  # no conversions to dispatch: 61 norms a step
            return F.rms_norm(x, (x.shape[-1],), weight, self.eps)
        # Normalised in float32 whatever the model dtype, as Hugging Face does.
        out = F.rms_norm(x.float(), (x.shape[-1],), weight.float(), self.eps)
        return out.to(x.dtype)
