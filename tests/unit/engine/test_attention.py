"""Decode attention: the native kernel reading the paged cache in place equals the
PyTorch path (gather the context, masked SDPA) on the same cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from vigil.engine.kernels import cache_dir, cached_or_built, cpu_identity, paged_attention_ext
from vigil.engine.model.attention import AttentionMetadata, PrefillSpan, paged_attention, windowed


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


def test_a_window_keeps_each_decodes_last_slots_and_cuts_a_chunks_context() -> None:
    # Two decodes with 3 and 9 tokens of context (the new one included), slots 100 + pos
    # and 200 + pos; a prefill chunk of 4 tokens after 10 cached, context slots 300 + pos.
    slots = torch.stack([torch.arange(9) + 100, torch.arange(9) + 200])
    slots[0, 3:] = 0  # padding past the first one's length
    lens = torch.tensor([3, 9])
    context = torch.arange(14) + 300
    meta = AttentionMetadata(
        slot_mapping=torch.tensor([102, 208, 310, 311, 312, 313]),
        num_decodes=2,
        decode_slots=slots,
        decode_lens=lens,
        decode_mask=None,
        prefills=[PrefillSpan(2, 4, 10, context)],
    )
    w = windowed(meta, 4)
    assert w.decode_lens is not None and w.decode_lens.tolist() == [3, 4]
    assert w.decode_slots is not None
    assert w.decode_slots[0, :3].tolist() == [100, 101, 102]  # all three: shorter than 4
    assert w.decode_slots[1].tolist() == [205, 206, 207, 208]  # positions 5..8
    (span,) = w.prefills
    # The chunk's first query (position 10) sees positions 7..10: the context starts at 7.
    assert (span.first_position, span.window) == (7, 4)
    assert span.context_slots is not None and span.context_slots.tolist() == list(range(307, 314))
    assert torch.equal(w.slot_mapping, meta.slot_mapping)  # every token's K/V still written


def test_a_windowed_chunk_attends_to_the_band_the_full_mask_allows() -> None:
    # One chunk of 10 tokens from the start, window 3: the same as full attention with
    # every key 3 or more positions back masked by hand.
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(10, 2, 8, generator=gen) for _ in range(3))
    meta = AttentionMetadata(torch.arange(10), 0, None, None, None, [PrefillSpan(0, 10, 0, None)])
    out = paged_attention(
        q, k, v, torch.zeros(10, 2, 8), torch.zeros(10, 2, 8), windowed(meta, 3), 0.5
    )
    pos = torch.arange(10)
    band = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - 3)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=band, scale=0.5
    ).transpose(0, 1)
    torch.testing.assert_close(out, expected)
