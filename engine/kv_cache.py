"""Bookkeeping for the paged KV cache: which fixed-size blocks are free or in use.

Plain Python over plain ids (no tensors): the runner owns the memory, this
module only decides which block ids a sequence may write. Running out of blocks
is back-pressure, returned as None, never an exception.
"""

from __future__ import annotations

from collections import deque
from typing import NewType

BlockId = NewType("BlockId", int)


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        assert num_blocks > 0, "a KV cache needs at least one block"
        self.num_blocks = num_blocks
        self._free: deque[BlockId] = deque(BlockId(i) for i in range(num_blocks))
        self._ref_counts = [0] * num_blocks

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def allocate(self, n: int) -> list[BlockId] | None:
        """n fresh blocks, or None (and nothing taken) when fewer are free."""
        if n > len(self._free):
            return None
        blocks = [self._free.popleft() for _ in range(n)]
        for b in blocks:
            assert self._ref_counts[b] == 0, f"block {b} was free but referenced"
            self._ref_counts[b] = 1
        return blocks

    def free(self, blocks: list[BlockId]) -> None:
        for b in blocks:
            assert self._ref_counts[b] > 0, f"block {b} freed twice"
            self._ref_counts[b] -= 1
            if self._ref_counts[b] == 0:
                self._free.append(b)


def blocks_needed(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)
