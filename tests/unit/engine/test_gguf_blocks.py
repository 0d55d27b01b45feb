"""A GGUF tensor's blocks as the packed kernels' codes, against the `gguf` package's own
dequantization of the same bytes: exact where the README says so, within half of
1/127 of each group's largest weight where a type is requantized to int8.

Blocks are the package's quantizers' where it has them; K-quants it only reads, so
theirs are random bytes with sane float16 scales (every bit pattern of the codes and
6-bit scales is a valid block)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from vigil.engine.loaders.gguf_blocks import to_codes
from vigil.engine.model.codes import GROUP_SIZE, Int4Codes, Int8Codes
from vigil.engine.precision import WeightBits, weight_bits

T = gguf.GGMLQuantizationType
ROWS, COLS = 8, 512  # two K-quant super-blocks a row


def quantized(qtype: gguf.GGMLQuantizationType) -> np.ndarray:
    """(ROWS, bytes a row) blocks of random weights, or of random bytes for K-quants."""
    rng = np.random.default_rng(int(qtype))
    if qtype not in (T.Q4_K, T.Q5_K, T.Q6_K):
        weights = rng.standard_normal((ROWS, COLS)).astype(np.float32) * 0.05
        return gguf.quants.quantize(weights, qtype)
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (ROWS * COLS // block_size, type_size), dtype=np.uint8)
    scales = rng.uniform(1e-4, 1e-2, (raw.shape[0], 2)).astype(np.float16).view(np.uint8)
    if qtype == T.Q6_K:  # d last
        raw[:, -2:] = scales[:, :2]
    else:  # d and dmin first
        raw[:, :4] = scales
    return raw.reshape(ROWS, -1)


EXACT = [T.Q4_0, T.Q4_1, T.Q4_K, T.Q8_0, T.Q5_0]
REQUANTIZED = [T.Q5_1, T.Q5_K, T.Q6_K]


@pytest.mark.parametrize("qtype", EXACT, ids=lambda t: t.name)
def test_codes_reproduce_the_files_dequantized_weights_exactly(
    qtype: gguf.GGMLQuantizationType,
) -> None:
    raw = quantized(qtype)
    codes = to_codes(raw, qtype)
    expected = torch.from_numpy(gguf.quants.dequantize(raw, qtype))
    kind = Int4Codes if weight_bits(qtype.name) is WeightBits.FOUR else Int8Codes
    assert isinstance(codes, kind)
    assert torch.equal(codes.dequantize(), expected)


@pytest.mark.parametrize("qtype", REQUANTIZED, ids=lambda t: t.name)
def test_five_and_six_bit_types_are_int8_within_half_a_step(
    qtype: gguf.GGMLQuantizationType,
) -> None:
    raw = quantized(qtype)
    codes = to_codes(raw, qtype)
    assert isinstance(codes, Int8Codes) and codes.group == GROUP_SIZE
    expected = torch.from_numpy(gguf.quants.dequantize(raw, qtype))
    groups = expected.view(ROWS, -1, GROUP_SIZE)
    half_step = groups.abs().amax(dim=-1, keepdim=True) / 127 / 2
    error = (codes.dequantize().view_as(groups) - groups).abs()
    assert bool((error <= half_step * (1 + 1e-5)).all())
    assert float(error.max()) > 0  # requantized indeed: no accidental exactness claim


@pytest.mark.parametrize("qtype", [T.F32, T.F16, T.BF16], ids=lambda t: t.name)
def test_float_types_have_no_codes(qtype: gguf.GGMLQuantizationType) -> None:
    weights = np.ones((2, 64), dtype=np.float32)
    raw = weights if qtype == T.F32 else gguf.quants.quantize(weights, qtype)
    assert to_codes(raw, qtype) is None
    assert weight_bits(qtype.name) is WeightBits.FLOAT


def test_each_type_goes_to_the_path_its_bits_say() -> None:
    four = ["Q4_0", "Q4_1", "Q4_K", "Q3_K", "Q2_K", "IQ4_XS"]
    eight = ["Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0"]
    assert {weight_bits(t) for t in four} == {WeightBits.FOUR}
    assert {weight_bits(t) for t in eight} == {WeightBits.EIGHT}


def test_a_type_without_a_code_path_is_read_as_float_by_the_loader() -> None:
    """Q3_K has no codes here: the loader dequantizes it, and the mode quantizes that."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[T.Q3_K]
    raw = np.zeros((ROWS, COLS // block_size * type_size), dtype=np.uint8)
    assert to_codes(raw, T.Q3_K) is None
