"""Block pool bookkeeping: exact block ids, reference counts, back-pressure as None."""

from __future__ import annotations

import pytest

from vigil.engine.kv_cache import BlockPool, blocks_needed


def test_allocates_lowest_free_ids_first_and_counts_them() -> None:
    pool = BlockPool(4)
    assert pool.allocate(3) == [0, 1, 2]
    assert (pool.num_free, pool.num_used) == (1, 3)
    assert pool.allocate(1) == [3]
    assert (pool.num_free, pool.num_used) == (0, 4)


def test_freed_blocks_are_reused_after_the_never_used_ones() -> None:
    pool = BlockPool(4)
    first = pool.allocate(2)
    assert first == [0, 1]
    pool.free(first)
    assert pool.num_free == 4
    assert pool.allocate(4) == [2, 3, 0, 1]


def test_allocate_returns_none_and_takes_nothing_when_short() -> None:
    pool = BlockPool(4)
    pool.allocate(3)
    assert pool.allocate(2) is None
    assert pool.num_free == 1
    assert pool.allocate(1) == [3]  # the one free block was not taken by the failed call


def test_allocate_zero_blocks_is_an_empty_list() -> None:
    pool = BlockPool(2)
    assert pool.allocate(0) == []
    assert pool.num_free == 2


def test_freeing_a_block_twice_is_an_invariant_error() -> None:
    pool = BlockPool(2)
    blocks = pool.allocate(1)
    assert blocks is not None
    pool.free(blocks)
    with pytest.raises(AssertionError, match="freed twice"):
        pool.free(blocks)
    assert pool.num_free == 2  # the count never went negative


def test_freeing_a_block_never_allocated_is_an_invariant_error() -> None:
    pool = BlockPool(2)
    with pytest.raises(AssertionError):
        pool.free([1])  # type: ignore[list-item]


def test_a_pool_needs_at_least_one_block() -> None:
    with pytest.raises(AssertionError):
        BlockPool(0)


@pytest.mark.parametrize(
    ("num_tokens", "expected"), [(0, 0), (1, 1), (15, 1), (16, 1), (17, 2), (32, 2), (33, 3)]
)
def test_blocks_needed_rounds_up(num_tokens: int, expected: int) -> None:
    assert blocks_needed(num_tokens, 16) == expected
