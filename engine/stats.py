"""Snapshots the engine publishes every step, read by metrics and the console."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StepStats:
    num_seqs: int  # sequences in the batch
    num_tokens: int  # tokens fed through the model
    num_decodes: int
    schedule_s: float
    prepare_s: float
    forward_s: float
    sample_s: float
    output_s: float  # detokenize, stop checks, events
    # Prompt tokens of the sequences that got their first token this step, prefix-cache
    # hits included: what a prompt costs in time to first token, as the gateway counts it.
    num_prompt_tokens_done: int = 0
    # Attention work of the prompt chunks (items feeding more than one token): for each,
    # its new tokens times the context each attends to on average, so that a model of
    # step time can tell a long prompt's quadratic cost from its tokens' linear one.
    num_prefill_pairs: int = 0

    @property
    def total_s(self) -> float:
        return self.schedule_s + self.prepare_s + self.forward_s + self.sample_s + self.output_s


def prefill_pairs_of(num_computed: int, num_new: int) -> int:
    """Query-key pairs of a chunk of num_new tokens after num_computed: each new token
    attends to the context before it and to itself (causal), num_new * num_computed
    plus num_new * (num_new + 1) / 2."""
    return num_new * num_computed + num_new * (num_new + 1) // 2


@dataclass(frozen=True, slots=True)
class EngineStats:
    num_waiting_interactive: int
    num_waiting_batch: int
    num_running: int
    num_kv_blocks_total: int
    num_kv_blocks_used: int
    num_kv_blocks_cached: int  # carry a prefix hash, in use or evictable
    num_preemptions: int
    num_prefix_queried_tokens: int  # tokens of admitted sequences looked up in the cache
    num_prefix_hit_tokens: int  # of those, served from cached blocks
    num_steps: int
    last_step: StepStats | None

    @property
    def num_waiting(self) -> int:
        return self.num_waiting_interactive + self.num_waiting_batch

    @property
    def kv_cache_usage(self) -> float:
        return self.num_kv_blocks_used / self.num_kv_blocks_total


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One forward pass of the embedding batcher, as an observer sees it."""

    size: int
    waits_s: tuple[float, ...]  # each item's arrival -> batch start: the batching delay
    run_s: float
