"""Bookkeeping for the paged KV cache: which fixed-size blocks are free, shared or cached.

Plain Python over plain ids (no tensors): the runner owns the memory, this
module only decides which block ids a sequence may write. Running out of blocks
is back-pressure, returned as None, never an exception.

Prefix cache. A full block is named by a hash chain over its tokens:

    hash(block i) = H(hash(block i-1), token ids of block i, cache salt)

so equal hashes mean equal tokens at equal positions after an equal prefix,
hence equal K/V. A full block, once computed, is registered under its hash. When
its last user frees it, it joins the free queue but keeps its hash: until the
pool hands it out again (least recently freed first), a new sequence whose
prompt starts with the same tokens takes it instead of recomputing it.

    free queue (LRU first):  [ 7 | 2 | 9 | ... ]   <- freed blocks join at the end
                               ^ next to allocate; if 7 has a hash, that cache entry is evicted

A prompt rarely ends on a block boundary where a cached one parts from it: a shared
system prompt of 120 tokens fills 7 blocks of 16 and 8 tokens of the 8th, whose other 8
differ per user. `partial_hit` finds, among the cached blocks that follow the same
parent, the one whose leading tokens match the most of the next ones (up to
PARTIAL_CANDIDATES of those starting with the same token, most recent first); the
scheduler copies that many tokens' K/V into a new block instead of recomputing them.
"""

from __future__ import annotations

import hashlib
import itertools
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import NewType

BlockId = NewType("BlockId", int)
BlockHash = NewType("BlockHash", bytes)
PARTIAL_CANDIDATES = 16  # blocks compared per partial lookup, so its cost has a bound


def hash_block(parent: BlockHash | None, token_ids: Sequence[int], salt: str) -> BlockHash:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(parent or b"")
    digest.update(array("q", token_ids).tobytes())
    digest.update(salt.encode())
    return BlockHash(digest.digest())


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        assert num_blocks > 0, "a KV cache needs at least one block"
        self.num_blocks = num_blocks
        self._ref_counts = [0] * num_blocks
        self._free: OrderedDict[BlockId, None] = OrderedDict(
            (BlockId(i), None) for i in range(num_blocks)
        )
        self._hash_of: dict[BlockId, BlockHash] = {}
        self._by_hash: dict[BlockHash, BlockId] = {}
        # For partial hits: a cached block's parent and tokens, and the cached blocks by
        # (parent, first token), oldest first.
        self._tokens_of: dict[BlockId, tuple[BlockHash | None, tuple[int, ...]]] = {}
        self._by_start: dict[tuple[BlockHash | None, int], dict[BlockId, None]] = {}

    @property
    def num_free(self) -> int:
        """Blocks with no user, cached ones included (they are evicted on demand)."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def num_cached(self) -> int:
        """Blocks that carry a prefix hash, in use or not."""
        return len(self._hash_of)

    def allocate(self, n: int) -> list[BlockId] | None:
        """n blocks for new content, or None (and nothing taken) when fewer are free."""
        if n > len(self._free):
            return None
        blocks = []
        for _ in range(n):
            block, _ = self._free.popitem(last=False)
            assert self._ref_counts[block] == 0, f"block {block} was free but referenced"
            self._forget(block)
            self._ref_counts[block] = 1
            blocks.append(block)
        return blocks

    def free(self, blocks: Sequence[BlockId]) -> None:
        for b in blocks:
            assert self._ref_counts[b] > 0, f"block {b} freed twice"
            self._ref_counts[b] -= 1
            if self._ref_counts[b] == 0:
                self._free[b] = None

    def lookup(self, hashes: Sequence[BlockHash]) -> list[BlockId]:
        """The cached blocks for the longest leading run of `hashes` (no reference taken)."""
        hits = []
        for h in hashes:
            block = self._by_hash.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def share(self, blocks: Sequence[BlockId]) -> None:
        """Take a reference on cached blocks found by `lookup`, or on blocks in use (a
        forked choice's source, engine/scheduler.py)."""
        for b in blocks:
            assert b in self._hash_of or self._ref_counts[b] > 0, f"block {b} holds nothing"
            if self._ref_counts[b] == 0:
                del self._free[b]
            self._ref_counts[b] += 1

    def register(
        self,
        block: BlockId,
        block_hash: BlockHash,
        parent: BlockHash | None = None,
        token_ids: Sequence[int] = (),
    ) -> None:
        """Name a block that was just filled. If another block already holds the same
        content (two sequences computed it at once), the first stays the cached one.
        With its parent's hash and its tokens it can also serve partial hits."""
        assert self._ref_counts[block] > 0, f"block {block} registered while free"
        if block_hash in self._by_hash or block in self._hash_of:
            return
        self._by_hash[block_hash] = block
        self._hash_of[block] = block_hash
        if token_ids:
            self._tokens_of[block] = (parent, tuple(token_ids))
            self._by_start.setdefault((parent, token_ids[0]), {})[block] = None

    def partial_hit(
        self, parent: BlockHash | None, token_ids: Sequence[int]
    ) -> tuple[BlockId, int] | None:
        """The cached block after `parent` whose leading tokens match the most of
        `token_ids`, and how many match (no reference taken); None if none does."""
        if not token_ids:
            return None
        candidates = self._by_start.get((parent, token_ids[0]), {})
        best: tuple[BlockId, int] | None = None
        for block in itertools.islice(reversed(candidates), PARTIAL_CANDIDATES):
            cached = self._tokens_of[block][1]
            n = next(
                (i for i, (a, b) in enumerate(zip(cached, token_ids, strict=False)) if a != b),
                min(len(cached), len(token_ids)),
            )
            if best is None or n > best[1]:
                best = (block, n)
        return best

    def ref_count(self, block: BlockId) -> int:
        return self._ref_counts[block]

    def _forget(self, block: BlockId) -> None:
        block_hash = self._hash_of.pop(block, None)
        if block_hash is not None:
            del self._by_hash[block_hash]
        named = self._tokens_of.pop(block, None)
        if named is not None:
            parent, token_ids = named
            start = (parent, token_ids[0])
            del self._by_start[start][block]
            if not self._by_start[start]:
                del self._by_start[start]


def blocks_needed(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)
