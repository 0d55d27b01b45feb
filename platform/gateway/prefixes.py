"""What each replica's prefix cache is likely to hold, as the gateway can tell from the
prompts it sent there: how many of a new prompt's leading tokens its engine will find
cached, so that the forecast counts only the tokens it will compute.

The engine caches full blocks of a prompt under a hash of the block and everything
before it (engine/kv_cache.py) and keeps them until their memory is needed, least
recently used first. The gateway keeps the same chain of hashes for the prompts it sent
to each engine (by replica), at most as many blocks as that engine's KV cache holds,
least recently used forgotten first. It is an estimate: the engine may have evicted a
block sooner (its memory also holds the running sequences) or kept one this gateway
did not send (another gateway's). A prompt's last token is always computed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

MAX_BLOCKS = 1 << 16  # remembered per engine, whatever its KV cache holds


def block_hashes(ids: Sequence[int], block_size: int) -> list[int]:
    """A hash of each full block of ids and everything before it."""
    hashes, parent = [], 0
    for start in range(0, len(ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(ids[start : start + block_size])))
        hashes.append(parent)
    return hashes


class PrefixMemory:
    def __init__(self) -> None:
        self._blocks: dict[tuple[str, str], OrderedDict[int, None]] = {}

    def cached_tokens(
        self, engine_key: str, replica: str, hashes: Sequence[int], block_size: int, num_ids: int
    ) -> int:
        """Leading tokens of a prompt (its block hashes, num_ids tokens) that the engine
        will likely find cached."""
        seen = self._blocks.get((engine_key, replica))
        if not seen:
            return 0
        num_blocks = 0
        for h in hashes:
            if h not in seen:
                break
            num_blocks += 1
        return min(num_blocks * block_size, num_ids - 1)

    def remember(
        self, engine_key: str, replica: str, hashes: Sequence[int], capacity_blocks: int
    ) -> None:
        """A prompt sent there: its blocks are the most recently used."""
        seen = self._blocks.setdefault((engine_key, replica), OrderedDict())
        for h in hashes:
            seen[h] = None
            seen.move_to_end(h)
        limit = min(max(capacity_blocks, 1), MAX_BLOCKS)
        while len(seen) > limit:
            seen.popitem(last=False)
