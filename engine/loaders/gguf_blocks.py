"""A GGUF tensor's blocks as the packed kernels' codes (model/codes.py), where the type
has a code path, tensor by tensor as read.

Each type goes to the closest path Vigil has, against the file's own dequantized
weights (the `gguf` package's `dequantize`; README "GGUF types" for what each costs):

    Q4_0   int4, exactly: w = (q - 8) d is q d + m with m = -8 d
    Q4_1   int4, exactly: its own rule (q d + m)
    Q4_K   int4: each 32-weight sub-block's scale d * sc and minimum -dmin * mn
           (6-bit sc, mn) are that group's d and m, exact in float32
    Q8_0   int8, exactly: its own rule
    Q5_0   int8, exactly: w = (q - 16) d, q - 16 in -16..15
    Q5_1, Q5_K, Q6_K
           int8, requantized from the dequantized weights per group of 32 (Q8_0's
           rule): within half of 1/127 of each group's largest weight
    F32, F16, BF16, and any other type the package reads
           float

precision.weight_bits says which of these a type is, for `--quantization auto`.
"""

from __future__ import annotations

import gguf
import numpy as np
import torch

from vigil.engine.model.codes import GROUP_SIZE, Codes, Int4Codes, Int8Codes, quantize_int8
from vigil.engine.precision import WeightBits, weight_bits

T = gguf.GGMLQuantizationType
QK_K = 256  # weights of a K-quant super-block


def to_codes(raw: np.ndarray, qtype: gguf.GGMLQuantizationType) -> Codes | None:
    """A 2-D tensor's raw blocks, (rows, bytes a row) uint8 as GGUFReader shapes them,
    as codes; None where the type has no code path (float, or read only dequantized)."""
    if weight_bits(qtype.name) is WeightBits.FLOAT:
        return None
    rows = raw.shape[0]
    blocks = raw.reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1])  # (B, bytes a block)
    if qtype == T.Q4_0:
        d = _halves(blocks[:, :2])
        return _int4(rows, _nibbles(blocks[:, 2:]), d, -8 * d)
    if qtype == T.Q4_1:
        return _int4(rows, _nibbles(blocks[:, 4:]), _halves(blocks[:, :2]), _halves(blocks[:, 2:4]))
    if qtype == T.Q4_K:
        return _q4_k(rows, blocks)
    if qtype == T.Q8_0:
        return _int8(rows, blocks[:, 2:].view(np.int8), _halves(blocks[:, :2]))
    if qtype == T.Q5_0:
        high = np.unpackbits(blocks[:, 2:6], axis=1, bitorder="little")  # bit j: weight j
        q = (_nibbles(blocks[:, 6:]) | (high << 4)).astype(np.int8) - np.int8(16)
        return _int8(rows, q, _halves(blocks[:, :2]))
    if weight_bits(qtype.name) is WeightBits.EIGHT:
        weights = torch.from_numpy(gguf.quants.dequantize(raw, qtype))
        return quantize_int8(weights.reshape(rows, -1))
    return None


def _halves(b: np.ndarray) -> np.ndarray:
    """(B, 2) uint8 -> (B,) float32 of each block's float16."""
    return b.copy().view(np.float16).astype(np.float32).reshape(-1)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(B, 16) packed bytes -> (B, 32) codes: low nibbles are weights 0..15, high 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _int4(rows: int, q: np.ndarray, d: np.ndarray, m: np.ndarray) -> Int4Codes:
    return Int4Codes(
        torch.from_numpy(np.ascontiguousarray(q, dtype=np.uint8)).view(rows, -1),
        torch.from_numpy(d.astype(np.float32)).view(rows, -1),
        torch.from_numpy(m.astype(np.float32)).view(rows, -1),
    )


def _int8(rows: int, q: np.ndarray, d: np.ndarray) -> Int8Codes:
    q8 = torch.from_numpy(np.ascontiguousarray(q, dtype=np.int8)).view(rows, -1)
    return Int8Codes(q8, torch.from_numpy(d).view(rows, -1))


def _q4_k(rows: int, blocks: np.ndarray) -> Int4Codes:
    """(B, 144) Q4_K super-blocks of 256 weights: d, dmin (float16), 12 bytes of eight
    6-bit scales and minimums, then 128 bytes: 32-byte chunk c holds sub-block 2c in its
    low nibbles and 2c + 1 in its high ones."""
    n = blocks.shape[0]
    d, dmin = _halves(blocks[:, :2]), _halves(blocks[:, 2:4])
    sc, mn = gguf.quants.Q4_K.get_scale_min(blocks[:, 4:16])  # (B, 8) each
    qs = blocks[:, 16:].reshape(n, 4, 1, GROUP_SIZE)
    q = (qs >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 0x0F  # (B, 4, 2, 32)
    sub_d = d[:, None] * sc.astype(np.float32)  # products of 11 and 6 bits: exact
    sub_m = -(dmin[:, None] * mn.astype(np.float32))
    return _int4(rows, q.reshape(n, QK_K), sub_d, sub_m)
