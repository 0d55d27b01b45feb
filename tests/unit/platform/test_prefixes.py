"""The gateway's estimate of each engine's prefix cache: the blocks of the prompts it
sent there, least recently used forgotten first, a prompt's last token never cached."""

from __future__ import annotations

from vigil.platform.gateway.prefixes import PrefixMemory, block_hashes

SYSTEM = list(range(100, 148))  # 48 tokens: three blocks of 16


def test_a_block_is_named_by_itself_and_everything_before_it() -> None:
    a = block_hashes([*SYSTEM, 1, 2, 3], 16)
    b = block_hashes([*SYSTEM, 4, 5], 16)
    assert len(a) == 3 and a == b  # the partial last block has no name
    assert block_hashes([*SYSTEM[16:32], *SYSTEM[:16], *SYSTEM[32:]], 16)[1:] != a[1:]


def test_a_shared_system_prompt_is_found_on_the_engine_it_was_sent_to() -> None:
    memory = PrefixMemory()
    first = [*SYSTEM, 7, 8, 9]
    memory.remember("m@1", "w1", block_hashes(first, 16), capacity_blocks=100)
    second = [*SYSTEM, 10, 11, 12, 13]
    hashes = block_hashes(second, 16)
    assert memory.cached_tokens("m@1", "w1", hashes, 16, len(second)) == 48
    assert memory.cached_tokens("m@1", "w2", hashes, 16, len(second)) == 0  # other replica
    assert memory.cached_tokens("m@2", "w1", hashes, 16, len(second)) == 0  # other engine
    # The same prompt again: its last token is computed, whatever is cached.
    assert memory.cached_tokens("m@1", "w1", block_hashes(SYSTEM, 16), 16, 48) == 47


def test_the_least_recently_used_blocks_are_forgotten_at_the_engines_capacity() -> None:
    memory = PrefixMemory()
    old = list(range(1000, 1032))
    memory.remember("m@1", "w1", block_hashes(old, 16), capacity_blocks=4)
    memory.remember("m@1", "w1", block_hashes(SYSTEM, 16), capacity_blocks=4)
    assert memory.cached_tokens("m@1", "w1", block_hashes([*old, 1], 16), 16, 33) == 0
    assert memory.cached_tokens("m@1", "w1", block_hashes([*SYSTEM, 1], 16), 16, 49) == 48
