"""Rotary position embeddings: the frequencies of each scaling a config may name, and
the cos/sin tables every layer of a step shares.

The frequencies follow transformers' rope init functions (modeling_rope_utils), which
the parity tests hold them to: `linear` divides every frequency by the factor, `llama3`
divides only the low ones and blends the middle band, `yarn` blends interpolated and
extrapolated frequencies over a ramp and scales cos/sin by an attention factor.
`dynamic` (NTK) changes nothing up to max_position_embeddings, where transformers
starts raising the base as a sequence grows; the engine's context stops there, so
within it the plain frequencies are the exact ones.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from vigil.engine.model.config import RopeConfig

RopeTables = tuple[torch.Tensor, torch.Tensor]


def inverse_frequencies(head_dim: int, rope: RopeConfig) -> tuple[torch.Tensor, float]:
    """(D/2,) inverse frequencies, and the factor cos and sin are scaled by."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (rope.theta**exponents)
    if rope.frequency_divisors is not None:
        inv_freq = inv_freq / torch.tensor(rope.frequency_divisors, dtype=torch.float32)
    if rope.type == "linear":
        return inv_freq / rope.factor, 1.0
    if rope.type == "llama3":
        return _llama3(inv_freq, rope), 1.0
    if rope.type == "yarn":
        return _yarn(inv_freq, head_dim, rope)
    return inv_freq, 1.0  # default, and dynamic within max_position_embeddings


def _llama3(inv_freq: torch.Tensor, rope: RopeConfig) -> torch.Tensor:
    assert rope.original_max_position is not None, "llama3 RoPE needs the original context"
    old_len = rope.original_max_position
    low_freq_wavelen = old_len / rope.low_freq_factor  # longer waves: divided by factor
    high_freq_wavelen = old_len / rope.high_freq_factor  # shorter waves: kept
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / rope.factor, inv_freq)
    smooth = (old_len / wavelen - rope.low_freq_factor) / (
        rope.high_freq_factor - rope.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def _yarn(inv_freq: torch.Tensor, head_dim: int, rope: RopeConfig) -> tuple[torch.Tensor, float]:
    assert rope.original_max_position is not None, "yarn RoPE needs the original context"

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = rope.attention_factor
    if attention_factor is None:
        if rope.mscale and rope.mscale_all_dim:
            attention_factor = mscale(rope.factor, rope.mscale) / mscale(
                rope.factor, rope.mscale_all_dim
            )
        else:
            attention_factor = mscale(rope.factor)

    def correction_dim(num_rotations: float) -> float:
        # the dimension whose wave turns num_rotations times over the original context
        turns = rope.original_max_position / (num_rotations * 2 * math.pi)  # type: ignore[operator]
        return head_dim * math.log(turns) / (2 * math.log(rope.theta))

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # no zero-width ramp
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolate = 1 - ramp  # 1: the dimension keeps its own frequency
    interpolated = inv_freq / rope.factor
    return interpolated * (1 - extrapolate) + inv_freq * extrapolate, float(attention_factor)


class RotaryEmbedding(nn.Module):
    """Precomputed cos/sin tables, indexed by absolute position.

    Rotate-half RoPE is x * cos + cat(-x2, x1) * sin. With the sign folded into the
    table (sin_signed = cat(-sin1, sin2)) the rotation is one roll of x by D/2:
    cat(x2, x1) * sin_signed, the same products, so float32 results are unchanged.
    """

    cos: torch.Tensor
    sin_signed: torch.Tensor

    def __init__(self, head_dim: int, max_position: int, rope: RopeConfig) -> None:
        super().__init__()
        inv_freq, attention_factor = inverse_frequencies(head_dim, rope)
        t = torch.arange(max_position, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)  # (P, D/2)
        emb = torch.cat([freqs, freqs], dim=-1)  # (P, D)
        sign = torch.cat([-torch.ones(head_dim // 2), torch.ones(head_dim // 2)])  # (D,)
        self.register_buffer("cos", emb.cos() * attention_factor, persistent=False)
        self.register_buffer("sin_signed", emb.sin() * attention_factor * sign, persistent=False)

    def tables(self, positions: torch.Tensor, dtype: torch.dtype) -> RopeTables:
        """The step's (T, 1, D) cos and signed sin, gathered once for every layer."""
        cos = self.cos[positions].unsqueeze(1).to(dtype)
        sin = self.sin_signed[positions].unsqueeze(1).to(dtype)
        return cos, sin


def apply_rope(x: torch.Tensor, rope: RopeTables) -> torch.Tensor:
    # x: (T, heads, D) -- queries and keys together
    cos, sin_signed = rope
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin_signed
