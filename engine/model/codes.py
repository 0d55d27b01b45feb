"""Quantized weights as integer codes and per-group scales: what a packed linear
(model/quantized.py) is built from, whether a GGUF file's own blocks gave them
(loaders/gguf_blocks.py) or float weights were quantized here.

Groups run along a row (the `in` axis of an (out, in) weight), GROUP_SIZE weights
each, as GGUF's 32-weight blocks do:

    Int4Codes  w = q * d + m, q in 0..15   (GGUF Q4_1's rule; Q4_0 is m = -8 d)
    Int8Codes  w = q * d,     q in -128..127 (GGUF Q8_0's rule), per group of
               `group` weights: GROUP_SIZE, or a whole row for the kernels that
               take one scale per output

Scales are float32 here, so that the codes say exactly what the file says; each
kernel's layout rounds them as it holds them (packed.pack_int4, pack_int8).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

GROUP_SIZE = 32  # weights sharing one scale (and minimum): GGUF's block


@dataclass(frozen=True, slots=True)
class Int4Codes:
    q: torch.Tensor  # (N, K) uint8 in 0..15
    d: torch.Tensor  # (N, K / GROUP_SIZE) float32
    m: torch.Tensor  # (N, K / GROUP_SIZE) float32

    @property
    def shape(self) -> tuple[int, int]:
        return (self.q.shape[0], self.q.shape[1])

    def dequantize(self) -> torch.Tensor:
        """(N, K) float32."""
        n, k = self.shape
        groups = self.q.view(n, k // GROUP_SIZE, GROUP_SIZE).float()
        return (groups * self.d.unsqueeze(-1) + self.m.unsqueeze(-1)).view(n, k)

    def rows(self, index: torch.Tensor) -> Int4Codes:
        return Int4Codes(self.q[index], self.d[index], self.m[index])


@dataclass(frozen=True, slots=True)
class Int8Codes:
    q: torch.Tensor  # (N, K) int8
    d: torch.Tensor  # (N, K / group) float32

    @property
    def shape(self) -> tuple[int, int]:
        return (self.q.shape[0], self.q.shape[1])

    @property
    def group(self) -> int:
        return self.q.shape[1] // self.d.shape[1]

    def dequantize(self) -> torch.Tensor:
        """(N, K) float32."""
        n, k = self.shape
        groups = self.q.view(n, k // self.group, self.group).float()
        return (groups * self.d.unsqueeze(-1)).view(n, k)

    def rows(self, index: torch.Tensor) -> Int8Codes:
        return Int8Codes(self.q[index], self.d[index])


Codes = Int4Codes | Int8Codes
# A weight as a loader hands it over: float, or a quantized file's own codes.
Weight = torch.Tensor | Int4Codes | Int8Codes


def dequantized(weight: Weight) -> torch.Tensor:
    return weight if isinstance(weight, torch.Tensor) else weight.dequantize()


def quantize_int4(weight: torch.Tensor | Codes) -> Int4Codes:
    """(N, K) weights -> each group's codes between its minimum and maximum (Q4_1's
    rule: weights already of that shape come back exactly)."""
    n, k = weight.shape
    if k % GROUP_SIZE:
        raise ValueError(f"in_features {k} is not a multiple of {GROUP_SIZE}")
    groups = dequantized(weight).float().reshape(n, k // GROUP_SIZE, GROUP_SIZE)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scale = (high - low) / 15
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant group: q = 0
    q = ((groups - low.unsqueeze(-1)) / safe.unsqueeze(-1)).round().clamp(0, 15)
    return Int4Codes(q.to(torch.uint8).view(n, k), scale, low)


def quantize_int8(weight: torch.Tensor | Codes, group: int | None = None) -> Int8Codes:
    """(N, K) weights -> symmetric int8 codes, one scale per `group` weights of a row
    (Q8_0's rule at GROUP_SIZE: a group's largest magnitude is 127 d). None: groups of
    GROUP_SIZE where a row divides into them, else the whole row."""
    n, k = weight.shape
    if group is None:
        group = k if k % GROUP_SIZE else GROUP_SIZE
    if k % group:
        raise ValueError(f"in_features {k} is not a multiple of {group}")
    groups = dequantized(weight).float().reshape(n, k // group, group)
    scale = groups.abs().amax(dim=-1) / 127  # (N, K / group)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale)).unsqueeze(-1)
    q = (groups / safe).round().clamp(-127, 127)
    return Int8Codes(q.to(torch.int8).view(n, k), scale)


def cat_codes(parts: Sequence[Codes]) -> Codes:
    """Codes of weights stacked along `out` (q, k, v into one qkv_proj). Parts of one
    kind stay that kind; where int4 meets int8 (a file that quantized v more finely
    than q and k), the int4 parts are requantized to int8, the finer of the two."""
    if all(isinstance(p, Int4Codes) for p in parts):
        fours = [p for p in parts if isinstance(p, Int4Codes)]
        return Int4Codes(
            torch.cat([p.q for p in fours]),
            torch.cat([p.d for p in fours]),
            torch.cat([p.m for p in fours]),
        )
    eights = [p if isinstance(p, Int8Codes) else quantize_int8(p) for p in parts]
    if len({p.group for p in eights}) != 1:
        eights = [quantize_int8(p) for p in eights]
    return Int8Codes(torch.cat([p.q for p in eights]), torch.cat([p.d for p in eights]))
