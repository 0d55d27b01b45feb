"""Decode attention: the native kernel reading the paged cache in place equals the
PyTorch path (gather the context, masked SDPA) on the same cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from vigil.engine.kernels import cache_dir, cached_or_built, cpu_identity, paged_attention_ext
from vigil.engine.model.attention import AttentionMetadata, paged_attention


def decode_case(
    lens: list[int], heads: int, kv_heads: int, block_size: int = 4, dim: int = 16
) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(len(lens) * 100 + heads)
    num_blocks = 64
    k_cache = torch.randn(num_blocks * block_size, kv_heads, dim, generator=gen)
    v_cache = torch.randn(num_blocks * block_size, kv_heads, dim, generator=gen)
    order = torch.randperm(num_blocks, generator=gen)  # blocks scattered over the pool
    max_len = max(lens)
    blocks_per_seq = -(-max_len // block_size)
    table = order[: len(lens) * blocks_per_seq].view(len(lens), blocks_per_seq)
    pos = torch.arange(max_len)
    slots = table[:, pos // block_size] * block_size + pos % block_size
    q = torch.randn(len(lens), heads, dim, generator=gen)
    k_new = torch.randn(len(lens), kv_heads, dim, generator=gen)
    v_new = torch.randn(len(lens), kv_heads, dim, generator=gen)
    lens_t = torch.tensor(lens)
    new_slots = slots[torch.arange(len(lens)), lens_t - 1]
    return q, k_new, v_new, k_cache, v_cache, slots, lens_t, new_slots


def run(case: tuple[torch.Tensor, ...], kernel: bool) -> torch.Tensor:
    q, k_new, v_new, k_cache, v_cache, slots, lens, new_slots = (t.clone() for t in case)
    pos = torch.arange(slots.shape[1])
    ext = paged_attention_ext()
    assert ext is not None
    meta = AttentionMetadata(
        slot_mapping=new_slots,
        num_decodes=q.shape[0],
        decode_slots=slots,
        decode_lens=lens,
        decode_mask=None if kernel else (pos[None, :] < lens[:, None])[:, None, None, :],
        prefills=[],
        decode_kernel=ext.paged_decode_attention if kernel else None,
    )
    return paged_attention(q, k_new, v_new, k_cache, v_cache, meta, scale=0.25)


def test_native_kernel_builds_on_this_machine() -> None:
    # The CI machine has a compiler: a silent fallback there would hide a broken build.
    assert paged_attention_ext() is not None


def test_the_cached_build_is_named_for_the_cpu_flags_not_only_its_model_name() -> None:
    # Builds use -march=native; one model name covers CPUs with and without AVX-512.
    flags = next(
        line.partition(":")[2].split()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("flags")
    )
    assert set(flags) <= set(cpu_identity().split())


@pytest.mark.parametrize(
    ("lens", "heads", "kv_heads"),
    [([1], 4, 4), ([5, 17, 3, 9], 6, 2), ([32, 1, 31, 16, 8], 9, 3), ([12] * 3, 8, 1)],
)
def test_native_decode_attention_equals_gather_and_sdpa(
    lens: list[int], heads: int, kv_heads: int
) -> None:
    case = decode_case(lens, heads, kv_heads)
    torch.testing.assert_close(
        run(case, kernel=True), run(case, kernel=False), atol=1e-5, rtol=1e-5
    )


def test_a_start_stopped_mid_build_leaves_nothing_that_blocks_the_next(tmp_path: Path) -> None:
    """A killed start leaves its build folder (with torch's lock in it) behind; the next
    start loads the finished library from the cache without looking at it."""
    ext = paged_attention_ext()
    assert ext is not None
    name = ext.__name__
    built = cache_dir() / f"{name}.so"
    abandoned = tmp_path / f"{name}.build-killed"
    abandoned.mkdir()
    (abandoned / "lock").touch()
    shutil.copy(built, tmp_path / built.name)
    module = cached_or_built(name, Path("never-compiled.cpp"), tmp_path)
    assert hasattr(module, "paged_decode_attention")
