"""The kernels an int4 or int8 linear can run on this CPU, their weight layouts, and the
bfloat16 copy that serves the rows a packed kernel does not.

    ATEN  PyTorch's packed kernels (_weight_int4pack_mm_for_cpu, _weight_int8pack_mm):
          bfloat16 activations; every weight unpacked again for each row, so their time
          grows in step with the rows: up to FEW_ROWS, the bfloat16 copy beyond
    AVX2  packed_matmul.h, for CPUs whose widest vectors are AVX2 (where ATen's unpack
          to float per row too): float32 activations, each weight unpacked once for up
          to 8 rows; up to AVX2_FEW_ROWS
    VNNI  vnni_matmul.h, for CPUs with AVX-512 VNNI: activations quantized to int8 per
          group of 32, integer dot products 64 multiply-adds an instruction; faster than
          the bfloat16 copy at every row count measured, so it serves every row and no
          copy is kept, except beside AMX (VNNI_FEW_ROWS)

The VNNI kernel against the others, the bundled model's 120 int4 linears on random
activations, weights from memory, in one run (AMD EPYC with AVX-512 BF16 and VNNI, no
AMX; ms, one thread / two): 1 row 4.4 / 3.3 against ATen's 8.9 / 4.4; 16 rows 20 / 9.0
against ATen's 51 / 24 and the bfloat16 copy's 31 / 19; 64 rows 53 / 40 against 98 / 48;
512 rows 647 / 326 against 641 / 344 (an earlier run: 375 / 206 against 506 / 257).
The int8 head (49,152 x 576) at 1 row 1.3 / 0.75 against ATen's 5.5 / 2.1, at 16 rows
11 / 4.7 against 26 / 12.
"""

from __future__ import annotations

from enum import StrEnum
from types import ModuleType

import torch
import torch.nn.functional as F

from vigil.engine.kernels import packed_matmul_ext
from vigil.engine.model.codes import GROUP_SIZE  # weights, or VNNI's activations, a scale

VNNI_BLOCK = 16  # outputs one vector of the VNNI kernel holds


class Kernel(StrEnum):
    ATEN = "aten"
    AVX2 = "avx2"
    VNNI = "vnni"


def native_bfloat16() -> bool:
    """Whether oneDNN runs bfloat16 matmuls natively on this CPU (AVX-512 BF16, AMX)."""
    try:  # private, but the one place torch says so
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def amx_tiles() -> bool:
    """Whether this CPU (and its OS) run AMX tiles, which oneDNN's bfloat16 matmuls use."""
    try:  # private, as above
        return bool(torch.cpu._is_amx_tile_supported())
    except (AttributeError, RuntimeError):
        return False


MANY_ROWS_IN_BFLOAT16 = native_bfloat16()  # else the copy is multiplied in float32
# ATen's kernels cross the bfloat16 copy at ~8 rows where it is native, ~16 where the
# copy runs in float32; packed_matmul.h's cross it at ~64.
FEW_ROWS = 8 if MANY_ROWS_IN_BFLOAT16 else 16
AVX2_FEW_ROWS = 48
# Beside AMX the bfloat16 copy takes prefills: there (an Intel Xeon, one thread) it ran
# the model's linears at 256 rows in 144 ms, where VNNI took 188 on the EPYC above; the
# crossover on such a CPU is not measured.
VNNI_FEW_ROWS: int | None = 64 if amx_tiles() else None


def choose_kernel(int8_activations: bool) -> Kernel:
    """The kernel measured fastest on this CPU (the module docstring); where that is VNNI,
    which rounds activations to int8, the AVX2 kernel (float32 activations) unless
    `int8_activations` (engine/precision.py says why auto keeps them float)."""
    ext = packed_matmul_ext()
    if ext is None:
        return Kernel.ATEN
    if torch.backends.cpu.get_cpu_capability() == "AVX2":
        return Kernel.AVX2
    if ext.has_vnni:  # AVX-512 VNNI: AVX2's instructions too
        return Kernel.VNNI if int8_activations else Kernel.AVX2
    return Kernel.ATEN


def few_rows(kernel: Kernel) -> int | None:
    """The most rows a step sends to `kernel`; None: every row."""
    return {Kernel.ATEN: FEW_ROWS, Kernel.AVX2: AVX2_FEW_ROWS, Kernel.VNNI: VNNI_FEW_ROWS}[kernel]


def takes_rows(kernel: Kernel, rows: int) -> bool:
    limit = few_rows(kernel)
    return limit is None or rows <= limit


def extension(kernel: Kernel) -> ModuleType:
    ext = packed_matmul_ext()
    if ext is None or (kernel is Kernel.VNNI and not ext.has_vnni):
        raise RuntimeError(f"the {kernel} kernels did not build on this machine")
    return ext


# ---- layouts ---------------------------------------------------------------------


def pack_int4(
    q: torch.Tensor, d: torch.Tensor, m: torch.Tensor, kernel: Kernel
) -> tuple[torch.Tensor, torch.Tensor]:
    """q (N, K) int in 0..15, each group's d and m (N, K / 32) -> (packed, scales) in
    `kernel`'s layout, such that w = q * d + m:

    ATEN  (N, K / 2) uint8 in _convert_weight_to_int4pack_for_cpu's layout; scales
          (K / 32, N, 2) bfloat16: d and m + 8 d (it computes (q - 8) * d + zero)
    AVX2  (N, K / 2) uint8, byte j of a group holding weights j and j + 16; scales
          (N, K / 32, 2) float32: d and m
    VNNI  (N / 16, K / 32, 4, 64) uint8 and (N / 16, K / 32, 2, 16) float16, as
          vnni_matmul.h describes
    """
    n_out, n_in = q.shape
    if kernel is Kernel.ATEN:
        packed = torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1)
        pairs = torch.stack([d, m + 8 * d], dim=-1).transpose(0, 1)
        return packed.contiguous(), pairs.contiguous().to(torch.bfloat16)
    if kernel is Kernel.AVX2:
        halves = q.view(n_out, -1, 2, GROUP_SIZE // 2).to(torch.uint8)
        packed = (halves[:, :, 0] | (halves[:, :, 1] << 4)).reshape(n_out, -1)
        return packed.contiguous(), torch.stack([d, m], dim=-1).contiguous()
    blocks, groups = n_out // VNNI_BLOCK, n_in // GROUP_SIZE
    # k = 32 g + 8 c + 4 h + j: h = 0 in the low nibble of byte j of chunk c, 1 the high
    quads = q.to(torch.uint8).view(blocks, VNNI_BLOCK, groups, 4, 2, 4)  # (b, i, g, c, h, j)
    packed = (quads[..., 0, :] | (quads[..., 1, :] << 4)).permute(0, 2, 3, 1, 4)
    lanes = [t.view(blocks, VNNI_BLOCK, groups).permute(0, 2, 1) for t in (d, m)]
    scales = torch.stack(lanes, dim=2).to(torch.float16)  # (b, g, 2, i)
    return packed.reshape(blocks, groups, 4, 64).contiguous(), scales.contiguous()


def int8_group(kernel: Kernel, in_features: int) -> int:
    """Weights of a row that share one int8 scale: a group of 32 for VNNI (GGUF Q8_0's
    rule, so a Q8_0 table is held exactly), the whole row for ATen's and AVX2's kernels,
    which take one scale per output."""
    return GROUP_SIZE if kernel is Kernel.VNNI else in_features


def pack_int8(q: torch.Tensor, scale: torch.Tensor, kernel: Kernel) -> tuple[torch.Tensor, ...]:
    """q (N, K) int in -127..127 and scale (N, K / int8_group) -> (packed, scales):
    (N, K) int8 and (N,) bfloat16 (ATEN, AVX2), or VNNI's (N / 16, K / 32, 8, 64) uint8
    (q + 128) and (N / 16, K / 32, 16) float16, as vnni_matmul.h describes."""
    if kernel is not Kernel.VNNI:
        return q.to(torch.int8).contiguous(), scale.view(-1).to(torch.bfloat16)
    n_out, n_in = q.shape
    u = (q.to(torch.int16) + 128).to(torch.uint8)
    blocks, groups = n_out // VNNI_BLOCK, n_in // GROUP_SIZE
    lanes = u.view(blocks, VNNI_BLOCK, groups, 8, 4).permute(0, 2, 3, 1, 4)  # (b, g, j, i, 4)
    d = scale.view(blocks, VNNI_BLOCK, groups).permute(0, 2, 1).to(torch.float16)  # (b, g, i)
    return lanes.reshape(blocks, groups, 8, 64).contiguous(), d.contiguous()


def int8_rows(
    packed: torch.Tensor,
    scales: torch.Tensor,
    kernel: Kernel,
    ids: torch.Tensor,
    dtype: torch.dtype,
) -> torch.Tensor:
    """Rows `ids` of a pack_int8 weight, (n, K) in `dtype`."""
    if kernel is not Kernel.VNNI:
        q = packed.index_select(0, ids).to(dtype)
        return q * scales.index_select(0, ids).to(dtype).unsqueeze(-1)
    blocks, groups = packed.shape[:2]
    lanes = packed.view(blocks, groups, 8, VNNI_BLOCK, 4)
    block, lane = ids // VNNI_BLOCK, ids % VNNI_BLOCK
    q = lanes[block, :, :, lane].reshape(len(ids), groups, GROUP_SIZE)  # (n, g, 32)
    d = scales[block, :, lane]  # (n, g)
    return ((q.to(dtype) - 128) * d.to(dtype).unsqueeze(-1)).view(len(ids), -1)


def fits(kernel: Kernel, out_features: int, in_features: int) -> bool:
    """Whether `kernel` takes a weight of this shape (ATen's takes any)."""
    if kernel is Kernel.ATEN:
        return True
    whole_groups = in_features % GROUP_SIZE == 0
    return whole_groups and (kernel is Kernel.AVX2 or out_features % VNNI_BLOCK == 0)


# ---- matmuls -----------------------------------------------------------------------


def int4_mm(
    kernel: Kernel, rows: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor
) -> torch.Tensor:
    """(n, in) rows of any float dtype @ a pack_int4 weight's transpose -> (n, out)."""
    if kernel is Kernel.ATEN:
        bf16 = rows.to(torch.bfloat16)
        return torch._weight_int4pack_mm_for_cpu(bf16, packed, GROUP_SIZE, scales)
    ext = extension(kernel)
    mm = ext.vnni_int4_mm if kernel is Kernel.VNNI else ext.int4_mm
    return mm(rows.float(), packed, scales)


def int8_mm(
    kernel: Kernel, rows: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor
) -> torch.Tensor:
    """(n, in) rows of any float dtype @ a pack_int8 weight's transpose -> (n, out)."""
    if kernel is Kernel.ATEN:
        return torch._weight_int8pack_mm(rows.to(torch.bfloat16), packed, scales)
    ext = extension(kernel)
    mm = ext.vnni_int8_mm if kernel is Kernel.VNNI else ext.int8_mm
    return mm(rows.float(), packed, scales)


# ---- the bfloat16 copy, for the rows a packed kernel does not take -----------------


def padded_rows(n: int) -> int:
    """Rows a bfloat16 matmul of n rows is run with: up to 128 the next multiple of 16,
    beyond it of 64. oneDNN builds and caches a kernel (and its scratch memory) for every
    shape it meets, so steps of every possible length grew a worker by 216 MB in a
    6-minute soak, still growing at the end; padded, a model's linears meet at most
    8 + 30 shapes each up to 2,048 rows, and the cache stays small. The pad costs at most
    15 rows up to 128, and under 50% (3% at 2,048) beyond."""
    step = 16 if n <= 128 else 64
    return -(-n // step) * step


PACKED_FOR_ROWS = 64  # oneDNN's layout hint: the rows a many-rows matmul is tuned for


def bfloat16_weight(weight: torch.Tensor) -> torch.Tensor:
    """An (out, in) weight in bfloat16 for the many-rows matmuls: where the CPU runs
    bfloat16 natively, in oneDNN's own blocked layout, into which F.linear would reorder a
    plain weight again on every call (the bundled model's linears, Intel Xeon with AMX,
    one thread: 60 -> 45 ms at 16 rows, 95 -> 50 at 64, 224 -> 144 at 256; the same
    results). Such a tensor is opaque and read only: in-place ops on it crash."""
    plain = weight.to(torch.bfloat16).contiguous()
    if not native_bfloat16():
        return plain
    return torch.ops.mkldnn._reorder_linear_weight(plain, PACKED_FOR_ROWS)


def bfloat16_linear(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """rows (bfloat16) @ a bfloat16_weight's transpose."""
    if weight.is_mkldnn:
        return torch.ops.mkldnn._linear_pointwise(rows, weight, None, "none", [], "")
    return F.linear(rows, weight)


def dense(weight: torch.Tensor) -> torch.Tensor:
    """A bfloat16_weight as a plain tensor."""
    return weight.to_dense() if weight.is_mkldnn else weight


def many_rows_mm(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(n, in) rows @ a bfloat16_weight's transpose: in bfloat16 where the CPU runs it
    natively (rows padded, see padded_rows), else in float32, the weight converted as
    it runs (no second copy held)."""
    n = rows.shape[0]
    if MANY_ROWS_IN_BFLOAT16:
        padded = F.pad(rows.to(torch.bfloat16), (0, 0, 0, padded_rows(n) - n))
        return bfloat16_linear(padded, weight)[:n]
    return F.linear(rows.float(), dense(weight).float())
