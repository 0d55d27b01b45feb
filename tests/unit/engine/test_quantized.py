"""Weight-only int4/int8 linears: exact on Q4_1-shaped weights, every kernel within
its activations' rounding (bfloat16, or int8 per group) of the float matmul, and the
choices refused where they cannot run."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from vigil.engine.kernels import packed_matmul_ext
from vigil.engine.loaders import llm
from vigil.engine.model import packed
from vigil.engine.model.codes import quantize_int4, quantize_int8
from vigil.engine.model.packed import (
    AVX2_FEW_ROWS,
    FEW_ROWS,
    GROUP_SIZE,
    VNNI_FEW_ROWS,
    Kernel,
    bfloat16_linear,
    bfloat16_weight,
    dense,
    few_rows,
    padded_rows,
)
from vigil.engine.model.quantized import (
    Int4Linear,
    Int8Embedding,
    Int8Linear,
    check_quantization,
)


def q4_1_weight(out_features: int, in_features: int, seed: int = 0) -> torch.Tensor:
    """Weights as a Q4_1 file holds them: each group of 32 is q * d + m, q in 0..15,
    with 0 and 15 both present (the file's d and m come from the group's min and max)."""
    g = torch.Generator().manual_seed(seed)
    groups = (out_features, in_features // GROUP_SIZE)
    q = torch.randint(0, 16, (*groups, GROUP_SIZE), generator=g)
    q[..., 0], q[..., 1] = 0, 15
    d = torch.rand(groups, generator=g) * 0.02 + 0.001
    m = -torch.rand(groups, generator=g) * 0.2
    return (q * d.unsqueeze(-1) + m.unsqueeze(-1)).view(out_features, in_features)


def test_q4_1_weights_come_back_exactly() -> None:
    w = q4_1_weight(64, 128)
    codes = quantize_int4(w)
    assert codes.q.min() >= 0 and codes.q.max() <= 15
    torch.testing.assert_close(codes.dequantize(), w, rtol=0, atol=1e-6)


def test_a_constant_group_quantizes_without_dividing_by_zero() -> None:
    w = torch.full((4, GROUP_SIZE), 0.25)
    codes = quantize_int4(w)
    assert torch.equal(codes.q, torch.zeros_like(codes.q))
    torch.testing.assert_close(codes.dequantize(), w)


@pytest.fixture(params=[True, False], ids=["bfloat16", "float32"])
def many_rows_in_bfloat16(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Either path for many rows, whichever this CPU would choose."""
    monkeypatch.setattr(packed, "MANY_ROWS_IN_BFLOAT16", request.param)


def test_many_rows_compute_in_bfloat16_only_where_the_cpu_runs_it_natively() -> None:
    native = packed.native_bfloat16()
    assert native is packed.MANY_ROWS_IN_BFLOAT16
    assert (8 if native else 16) == FEW_ROWS
    assert (64 if packed.amx_tiles() else None) == VNNI_FEW_ROWS
    assert [few_rows(k) for k in Kernel] == [FEW_ROWS, AVX2_FEW_ROWS, VNNI_FEW_ROWS]


@pytest.mark.parametrize("int8_activations", [True, False], ids=["int4-as-asked", "auto"])
def test_the_kernel_chosen_is_the_one_measured_for_this_cpu(int8_activations: bool) -> None:
    """The fastest; auto's keeps activations float where the fastest rounds them (VNNI)."""
    ext = packed_matmul_ext()
    assert ext is not None  # the CI machine has a compiler
    avx2_only = torch.backends.cpu.get_cpu_capability() == "AVX2"
    vnni = Kernel.VNNI if int8_activations else Kernel.AVX2
    expected = Kernel.AVX2 if avx2_only else vnni if ext.has_vnni else Kernel.ATEN
    assert packed.choose_kernel(int8_activations) is expected


def has_vnni() -> bool:
    ext = packed_matmul_ext()
    return ext is not None and bool(ext.has_vnni)


needs_vnni = pytest.mark.skipif(not has_vnni(), reason="this CPU has no AVX-512 VNNI")


@pytest.fixture(
    params=[Kernel.ATEN, Kernel.AVX2, pytest.param(Kernel.VNNI, marks=needs_vnni)], ids=str
)
def kernel(request: pytest.FixtureRequest) -> Kernel:
    """Each kernel this CPU can run (ATen's and packed_matmul.h's run on any here)."""
    assert packed_matmul_ext() is not None  # the CI machine has a compiler
    return Kernel(request.param)


@pytest.mark.usefixtures("many_rows_in_bfloat16")
@pytest.mark.parametrize("rows", [1, 3, 8, "few", "few + 1", 70])
def test_int4_linear_matches_the_float_matmul_at_every_row_count(
    rows: int | str, kernel: Kernel
) -> None:
    few = few_rows(kernel) or 64
    rows = {"few": few, "few + 1": few + 1}.get(str(rows), rows)
    assert isinstance(rows, int)
    w = q4_1_weight(96, 256, seed=rows)
    layer = Int4Linear(quantize_int4(w), kernel)
    x = torch.randn(rows, 256, generator=torch.Generator().manual_seed(1))
    out = layer(x)
    assert out.dtype == torch.float32 and out.shape == (rows, 96)
    # bfloat16 activations: ~3 significant digits of each product, summed over 256;
    # int8 per group of 32: within half a step of 1/127 of the group's largest.
    torch.testing.assert_close(out, F.linear(x, w), rtol=0.02, atol=0.05)


@pytest.mark.usefixtures("many_rows_in_bfloat16")
def test_the_kernels_switch_at_few_rows(kernel: Kernel) -> None:
    """Few rows read the packed weights, more rows the bfloat16 copy: spoil the copy and
    only the many-rows answer changes. A kernel for every row keeps no copy."""
    w = q4_1_weight(32, 64)
    layer = Int4Linear(quantize_int4(w), kernel)
    limit = few_rows(kernel)
    if limit is None:
        assert layer.dequantized is None
        assert layer(torch.ones(2048, 64)).abs().sum() > 0
        return
    layer.dequantized = bfloat16_weight(torch.zeros(32, 64))
    few, many = torch.ones(limit, 64), torch.ones(limit + 1, 64)
    assert layer(few).abs().sum() > 0
    assert layer(many).abs().sum() == 0


def test_bfloat16_weights_are_prepacked_where_native_and_compute_the_same() -> None:
    g = torch.Generator().manual_seed(8)
    w, x = torch.randn(96, 64, generator=g), torch.randn(16, 64, generator=g).bfloat16()
    held = bfloat16_weight(w)
    assert held.is_mkldnn == packed.native_bfloat16()
    assert torch.equal(dense(held), w.bfloat16())
    assert torch.equal(bfloat16_linear(x, held), F.linear(x, w.bfloat16()))


def test_int4_linear_keeps_leading_dims_and_a_bfloat16_model() -> None:
    layer = Int4Linear(quantize_int4(q4_1_weight(32, 64)))
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    assert layer(x).shape == (2, 3, 32) and layer(x).dtype == torch.bfloat16


@pytest.mark.usefixtures("many_rows_in_bfloat16")
@pytest.mark.parametrize("rows", [1, 5, 70])
def test_int8_linear_is_within_a_row_scale_of_the_float_matmul(rows: int, kernel: Kernel) -> None:
    g = torch.Generator().manual_seed(2)
    w, x = torch.randn(128, 64, generator=g) * 0.05, torch.randn(rows, 64, generator=g)
    out = Int8Linear(quantize_int8(w), kernel)(x)
    torch.testing.assert_close(out, F.linear(x, w), rtol=0.02, atol=0.05)


def test_the_avx2_kernels_are_exact_on_float_activations() -> None:
    """No bfloat16 rounding of the activations: float32 summation order only."""
    w = q4_1_weight(40, 128, seed=5)
    x = torch.randn(11, 128, generator=torch.Generator().manual_seed(6))  # tiles of 8 and 3
    int4 = Int4Linear(quantize_int4(w), Kernel.AVX2)
    torch.testing.assert_close(int4.packed_mm(x), F.linear(x, w), rtol=1e-5, atol=1e-5)
    int8 = Int8Linear(quantize_int8(w), Kernel.AVX2)
    exact = F.linear(x, int8.packed.float() * int8.scales.float().unsqueeze(1))
    torch.testing.assert_close(int8.packed_mm(x), exact, rtol=1e-5, atol=1e-5)


def int8_groups(x: torch.Tensor) -> torch.Tensor:
    """x as the VNNI kernel reads it: each group of 32 rounded to 1/127 of its largest."""
    groups = x.view(x.shape[0], -1, GROUP_SIZE)
    largest = groups.abs().amax(dim=-1, keepdim=True)
    inv = torch.where(largest > 0, 127 / largest, torch.zeros_like(largest))
    return ((groups * inv).round() * (largest / 127)).view_as(x)


@needs_vnni
def test_the_vnni_kernels_are_exact_on_int8_activations() -> None:
    """Exact integer sums of int8 activations and the weights: what is left is float
    scaling (weights as Q4_1 holds them: d and m exact in float16)."""
    g = torch.Generator().manual_seed(6)
    w = q4_1_weight(48, 128, seed=5).half().float()
    x = torch.randn(11, 128, generator=g)
    x[3, 32:64] = 0  # a group of zeros: scale 0, no division by it
    reference = int8_groups(x).double()
    int4 = Int4Linear(quantize_int4(w), Kernel.VNNI)
    d, m = int4.scales.float().permute(0, 3, 1, 2).reshape(48, -1, 2).unbind(-1)
    held = replace(quantize_int4(w), d=d, m=m).dequantize().double()
    torch.testing.assert_close(int4.packed_mm(x).double(), reference @ held.T, rtol=1e-5, atol=1e-5)
    int8 = Int8Linear(quantize_int8(w), Kernel.VNNI)
    rows = int8.rows(torch.arange(48), torch.float64)
    torch.testing.assert_close(int8.packed_mm(x).double(), reference @ rows.T, rtol=1e-5, atol=1e-5)


@needs_vnni
def test_vnni_int8_holds_a_q8_0_table_exactly() -> None:
    """Per group of 32, as GGUF Q8_0 ships the bundled model's embeddings and head: its
    dequantized values come back exactly, where one scale per row rounds them."""
    g = torch.Generator().manual_seed(9)
    q = torch.randint(-127, 128, (32, 128), generator=g).float()
    q[:, ::GROUP_SIZE] = 127  # each group's largest is 127 d, as Q8_0 quantizes
    d = (torch.rand(32, 4, generator=g) * 0.01 + 1e-3).half().float()
    w = (q.view(32, 4, GROUP_SIZE) * d.unsqueeze(-1)).view(32, 128)
    everything = torch.arange(32)
    codes = quantize_int8(w)
    assert torch.equal(Int8Linear(codes, Kernel.VNNI).rows(everything, torch.float32), w)
    assert not torch.equal(Int8Linear(codes, Kernel.ATEN).rows(everything, torch.float32), w)


def test_the_avx2_kernels_refuse_mismatched_weights() -> None:
    kernel = packed_matmul_ext()
    assert kernel is not None
    layer = Int4Linear(quantize_int4(q4_1_weight(8, 64)), Kernel.AVX2)
    x = torch.zeros(2, 64)
    with pytest.raises(RuntimeError, match="multiple of 32"):
        kernel.int4_mm(torch.zeros(2, 48), layer.packed, layer.scales)
    with pytest.raises(RuntimeError, match="q: "):
        kernel.int4_mm(x, layer.packed[:, :-1], layer.scales)
    with pytest.raises(RuntimeError, match="dm: "):
        kernel.int4_mm(x, layer.packed, layer.scales[:-1])
    with pytest.raises(RuntimeError, match="dm: "):
        kernel.int4_mm(x, layer.packed, layer.scales.bfloat16())
    head = Int8Linear(quantize_int8(torch.randn(8, 64)), Kernel.AVX2)
    with pytest.raises(RuntimeError, match="q: "):
        kernel.int8_mm(x, head.packed[:, :32], head.scales)
    with pytest.raises(RuntimeError, match="scales: "):
        kernel.int8_mm(x, head.packed, head.scales.float())
    # not whole groups: ATen's
    assert Int8Linear(quantize_int8(torch.randn(8, 48)), Kernel.AVX2).kernel is Kernel.ATEN


@needs_vnni
def test_the_vnni_kernels_refuse_mismatched_weights() -> None:
    kernel = packed_matmul_ext()
    assert kernel is not None
    layer = Int4Linear(quantize_int4(q4_1_weight(32, 64)), Kernel.VNNI)
    x = torch.zeros(2, 64)
    with pytest.raises(RuntimeError, match="multiple of 32"):
        kernel.vnni_int4_mm(torch.zeros(2, 48), layer.packed, layer.scales)
    with pytest.raises(RuntimeError, match="q: "):
        kernel.vnni_int4_mm(x, layer.packed[:, :, :3], layer.scales)
    with pytest.raises(RuntimeError, match="q: "):
        kernel.vnni_int4_mm(torch.zeros(2, 96), layer.packed, layer.scales)  # other K
    with pytest.raises(RuntimeError, match="dm: "):
        kernel.vnni_int4_mm(x, layer.packed, layer.scales[:1])
    with pytest.raises(RuntimeError, match="dm: "):
        kernel.vnni_int4_mm(x, layer.packed, layer.scales.float())
    head = Int8Linear(quantize_int8(torch.randn(32, 64)), Kernel.VNNI)
    with pytest.raises(RuntimeError, match="u: "):
        kernel.vnni_int8_mm(x, head.packed[:, :, :4], head.scales)
    with pytest.raises(RuntimeError, match="d: "):
        kernel.vnni_int8_mm(x, head.packed, head.scales[:1])
    with pytest.raises(RuntimeError, match="d: "):
        kernel.vnni_int8_mm(x, head.packed, head.scales.float())
    # 40 outputs are not whole blocks of 16: ATen's (whose int4 kernel takes no such either)
    assert Int8Linear(quantize_int8(torch.randn(40, 64)), Kernel.VNNI).kernel is Kernel.ATEN


@pytest.mark.parametrize("kind", ["avx2", pytest.param("vnni", marks=needs_vnni)])
def test_the_own_kernels_let_other_python_threads_run_meanwhile(kind: str) -> None:
    """The worker's event loop streams the last step's tokens while the engine thread
    computes the next: a kernel holding the GIL would stall it for the whole call."""
    kernel = packed_matmul_ext()
    assert kernel is not None
    g = torch.Generator().manual_seed(7)
    out_features, in_features = 32_768, 4_096  # one call: 0.02-0.5 s, by CPU
    x = torch.randn(8 if kind == "avx2" else 32, in_features, generator=g)
    q = torch.randint(0, 256, (out_features, in_features // 2), dtype=torch.uint8, generator=g)
    if kind == "avx2":
        dm = torch.rand(out_features, in_features // GROUP_SIZE, 2, generator=g)
        mm = kernel.int4_mm
    else:
        q = q.view(out_features // 16, in_features // GROUP_SIZE, 4, 64)
        dm = torch.rand(out_features // 16, in_features // GROUP_SIZE, 2, 16, generator=g).half()
        mm = kernel.vnni_int4_mm
    span: list[float] = []

    def call() -> None:
        span.append(time.perf_counter())
        while time.perf_counter() - span[0] < 0.2:  # enough work to tell, on any CPU
            mm(x, q, dm)
        span.append(time.perf_counter())

    worker = threading.Thread(target=call)
    worker.start()
    ticks = [time.perf_counter()]  # when this thread ran (to a millisecond) meanwhile
    while worker.is_alive():
        if (now := time.perf_counter()) - ticks[-1] > 0.001:
            ticks.append(now)
    worker.join()
    start, end = span
    inside = [start, *(t for t in ticks if start < t < end), end]
    longest_pause = max(b - a for a, b in itertools.pairwise(inside))
    assert longest_pause < (end - start) / 2, (
        f"stood still {longest_pause:.3f} s of {end - start:.3f}"
    )


def test_in_features_must_be_whole_groups() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        Int4Linear(quantize_int4(torch.zeros(8, 48)))


def test_unknown_quantization_or_a_cuda_device_is_refused() -> None:
    assert check_quantization("int4", torch.device("cpu")) == "int4"
    assert check_quantization("none", torch.device("cuda")) == "none"
    with pytest.raises(ValueError, match="none, int4, int8, auto"):
        check_quantization("int3", torch.device("cpu"))
    assert check_quantization("auto", torch.device("cuda")) == "auto"
    for name in ("int4", "int8"):
        with pytest.raises(ValueError, match="CPU only"):
            check_quantization(name, torch.device("cuda"))


@pytest.mark.slow  # loads the bundled model twice
def test_an_int4_model_holds_fewer_bytes_than_float32(smollm2, smollm2_int4) -> None:  # type: ignore[no-untyped-def]
    def linear_bytes(lm) -> int:  # type: ignore[no-untyped-def]
        layers = lm.model.model.layers
        return sum(b.numel() * b.element_size() for b in layers.buffers()) + sum(
            p.numel() * p.element_size() for p in layers.parameters() if p.dim() == 2
        )

    assert linear_bytes(smollm2_int4) < 0.7 * linear_bytes(smollm2)
    head, embed = smollm2_int4.model.lm_head, smollm2_int4.model.model.embed_tokens
    assert isinstance(head, Int8Linear)
    assert isinstance(embed, Int8Embedding) and embed.rows is head  # tied: one int8 table


def test_int8_embedding_rows_are_the_heads_weights(kernel: Kernel) -> None:
    w = torch.randn(64, 64, generator=torch.Generator().manual_seed(3))
    head = Int8Linear(quantize_int8(w), kernel)
    assert head.kernel is kernel
    ids = torch.tensor([4, 0, 63, 17])
    rows = Int8Embedding(head, torch.float32)(ids)
    if head.dequantized is not None:
        torch.testing.assert_close(rows, dense(head.dequantized)[ids].float(), rtol=0.01, atol=1e-3)
    torch.testing.assert_close(rows, w[ids], rtol=0, atol=w.abs().max().item() / 127)
    assert torch.equal(head.rows(ids, torch.float32), rows)


def test_bfloat16_matmuls_meet_a_bounded_number_of_row_counts() -> None:
    shapes = {padded_rows(n) for n in range(1, 2049)}
    assert len(shapes) == 8 + 30  # multiples of 16 up to 128, of 64 up to 2,048
    assert all(padded_rows(n) - n < (16 if n <= 128 else 64) for n in range(6, 2049))


def test_bfloat16_on_a_cpu_without_native_support_is_warned_about(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(llm, "native_bfloat16", lambda: False)
    warning = llm.slow_dtype_warning(cpu, torch.bfloat16)
    assert warning is not None and "--quantization int4" in warning
    assert llm.slow_dtype_warning(cpu, torch.float32) is None
    assert llm.slow_dtype_warning(cuda, torch.bfloat16) is None
    monkeypatch.setattr(llm, "native_bfloat16", lambda: True)
    assert llm.slow_dtype_warning(cpu, torch.bfloat16) is None
