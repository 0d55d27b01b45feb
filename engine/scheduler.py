"""Continuous batching: which sequences run this step, and how many tokens each.

Every step, each running sequence feeds the tokens it has not computed yet: one
for a decoding sequence, a chunk of its prompt for one still prefilling. The
token budget left after that admits waiting prompts, chunked when long. A
finished sequence frees its slot and blocks for the very next step.

Order of admission: interactive before batch, FCFS within a class. A batch
request that has waited `batch_aging_s` goes ahead of interactive ones (aging),
so a stream of interactive traffic delays batch work by at most that long while
there is room to run it. A request still waiting at its deadline is expired and
never starts.

Prefix cache: on admission a sequence takes every cached block that matches the
leading full blocks of its tokens and starts computing after them (always
computing at least its last token, whose logits it needs). Where a cached block
matches only the first tokens of its next block, the step copies those tokens' K/V
into the sequence's own new block (BlockCopy) and computes only the rest; a later
choice of a request copies its prompt's last, partial block from its running choice 0
the same way. A sequence
that asks for its prompt's logprobs takes no cached blocks: it needs every position's
logits.

Sliding window: when every layer of the model lets a query see only the last
`sliding_window` keys (Mistral v0.1, Phi-3), a block whose positions no later query
can see is given back as the sequence moves past it: the sequence's memory stays
about one window, however long it runs. Its entry in `block_ids` stays (stale: the
runner indexes blocks by position, and the window's metadata never reads it), and
`num_dropped_blocks` says how many leading entries are no longer the sequence's.

When a running sequence needs a block and none is free, the lowest-priority,
most recently arrived running sequence is preempted: its blocks are freed (they
stay in the prefix cache until evicted) and it goes back to the head of its
class's queue, to be recomputed later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from vigil.engine.kv_cache import BlockHash, BlockId, BlockPool, blocks_needed, hash_block
from vigil.engine.request import Priority, RequestId
from vigil.engine.sequence import SeqStatus, Sequence


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    enable_prefix_caching: bool = False
    cache_salt: str = ""  # model version: blocks of different weights never match
    batch_aging_s: float = float("inf")
    # Keys every layer's queries see (themselves included); None: all before them.
    sliding_window: int | None = None


@dataclass(slots=True)
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int  # tokens fed this step, starting at seq.num_computed_tokens

    @property
    def samples(self) -> bool:
        """True when this chunk reaches the end of the known tokens, so the step
        produces the sequence's next token."""
        return self.seq.num_computed_tokens + self.num_new_tokens == self.seq.num_tokens


@dataclass(frozen=True, slots=True)
class BlockCopy:
    """K/V of a cached block's first num_tokens tokens, to copy into dst before the step
    runs. The scheduler holds a reference on src until the engine has copied it."""

    src: BlockId
    dst: BlockId
    num_tokens: int


@dataclass(slots=True)
class StepPlan:
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    copies: list[BlockCopy] = field(default_factory=list)  # partial prefix hits
    preempted: list[Sequence] = field(default_factory=list)
    expired: list[Sequence] = field(default_factory=list)  # deadline passed while waiting

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    def __init__(self, config: SchedulerConfig, pool: BlockPool) -> None:
        self.config = config
        self.pool = pool
        self.waiting: dict[Priority, deque[Sequence]] = {p: deque() for p in Priority}
        self.running: list[Sequence] = []  # in admission order
        self.num_preemptions = 0
        self.num_prefix_queried_tokens = 0
        self.num_prefix_hit_tokens = 0
        self._arrivals = 0
        self._root = hash_block(None, (), config.cache_salt)

    def add(self, seq: Sequence, front: bool = False) -> None:
        """Queue a sequence: at the back of its class, or at the front (a later choice of
        a request already admitted)."""
        seq.arrival_index = self._arrivals
        self._arrivals += 1
        if front:
            self.waiting[seq.priority].appendleft(seq)
        else:
            self.waiting[seq.priority].append(seq)

    @property
    def num_waiting(self) -> int:
        return sum(len(q) for q in self.waiting.values())

    def has_work(self) -> bool:
        return bool(self.running) or self.num_waiting > 0

    def finish(self, seq: Sequence) -> None:
        """Take a sequence out of the engine and give its blocks back."""
        if seq.status is SeqStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SeqStatus.WAITING:
            self.waiting[seq.priority].remove(seq)
        self._release(seq)
        seq.status = SeqStatus.FINISHED

    def schedule(self, now_ts: float = 0.0) -> StepPlan:
        plan = StepPlan()
        self._expire(plan, now_ts)
        budget = self.config.max_num_batched_tokens
        for seq in list(self.running):
            if seq.status is not SeqStatus.RUNNING:
                continue  # preempted earlier in this loop
            num_new = min(seq.num_tokens - seq.num_computed_tokens, budget)
            if num_new == 0:
                continue
            if not self._reserve(seq, num_new, plan):
                continue  # seq itself was preempted
            plan.scheduled.append(ScheduledSeq(seq, num_new))
            budget -= num_new
        if not plan.preempted:
            self._admit(plan, budget, now_ts)
        return plan

    def update(self, plan: StepPlan, sampled: dict[RequestId, int]) -> None:
        """Advance each scheduled sequence past the tokens it computed this step,
        append the token it sampled, and name its newly filled blocks."""
        for item in plan.scheduled:
            seq = item.seq
            if seq.num_computed_tokens < seq.num_prompt_tokens:
                seq.num_prefill_chunks += 1
            seq.num_computed_tokens += item.num_new_tokens
            token = sampled.get(seq.request_id)
            if token is not None:
                seq.output_ids.append(token)
            if self.config.enable_prefix_caching:
                self._register_filled_blocks(seq, item.num_new_tokens)
            if self.config.sliding_window is not None:
                self._drop_slid_out_blocks(seq, self.config.sliding_window)

    def release_copies(self, plan: StepPlan) -> None:
        """The engine has copied plan.copies (or given the step up): drop the
        references that kept their sources from being evicted until then."""
        self.pool.free([copy.src for copy in plan.copies])

    # ---- admission ---------------------------------------------------------

    def _admission_order(self, now_ts: float) -> list[deque[Sequence]]:
        batch = self.waiting[Priority.BATCH]
        aged = batch and now_ts - batch[0].request.clock.arrival_ts >= self.config.batch_aging_s
        if aged:
            return [batch, self.waiting[Priority.INTERACTIVE]]
        return [self.waiting[p] for p in Priority]

    def _admit(self, plan: StepPlan, budget: int, now_ts: float) -> None:
        bs = self.config.block_size
        for queue in self._admission_order(now_ts):
            while queue and budget > 0 and len(self.running) < self.config.max_num_seqs:
                seq = queue[0]
                hits = self._cached_prefix(seq)
                # Share the hits before allocating, or allocate could evict them.
                self.pool.share(hits)
                num_computed = min(len(hits) * bs, seq.num_tokens - 1)
                blocks, copy = None, None
                if num_computed == len(hits) * bs and (
                    partial := self._partial_hit(seq, len(hits))
                ):
                    src, num_copied = partial
                    self.pool.share([src])  # held until the engine has copied it
                    blocks = self._allocate(seq, len(hits), num_computed + num_copied, budget)
                    if blocks is None:  # no room to hold the source too: compute them
                        self.pool.free([src])
                    else:  # into the first new block, which holds position num_computed
                        copy = BlockCopy(src, blocks[0], num_copied)
                        num_computed += num_copied
                if blocks is None:
                    blocks = self._allocate(seq, len(hits), num_computed, budget)
                if blocks is None:
                    self.pool.free(hits)
                    return  # the head waits for memory; nothing behind it jumps the queue
                if copy is not None:
                    plan.copies.append(copy)
                num_new = min(seq.num_tokens - num_computed, budget)
                queue.popleft()
                if self.config.enable_prefix_caching:
                    self.num_prefix_queried_tokens += seq.num_tokens
                    self.num_prefix_hit_tokens += num_computed
                seq.block_ids = [*hits, *blocks]
                if seq.num_prefill_chunks == 0:  # its first admission, not a resumption
                    seq.num_cached_prompt_tokens = num_computed
                seq.num_computed_tokens = num_computed
                seq.status = SeqStatus.RUNNING
                self.running.append(seq)
                plan.scheduled.append(ScheduledSeq(seq, num_new))
                budget -= num_new

    def _cached_prefix(self, seq: Sequence) -> list[BlockId]:
        """Cached blocks matching seq's leading full blocks (no reference taken)."""
        if not self._may_hit(seq):
            return []
        self._hash_known_blocks(seq)
        return self.pool.lookup(seq.block_hashes)

    def _allocate(
        self, seq: Sequence, num_hits: int, num_computed: int, budget: int
    ) -> list[BlockId] | None:
        """Blocks for seq's first step past num_computed tokens, after its num_hits."""
        num_new = min(seq.num_tokens - num_computed, budget)
        return self.pool.allocate(
            blocks_needed(num_computed + num_new, self.config.block_size) - num_hits
        )

    def _partial_hit(self, seq: Sequence, num_hits: int) -> tuple[BlockId, int] | None:
        """A cached block holding the first tokens of seq's block after its num_hits
        full hits, and how many (never seq's last token, whose logits it needs)."""
        if not self._may_hit(seq):
            return None
        start = num_hits * self.config.block_size
        token_ids = seq.tokens(start, min(start + self.config.block_size, seq.num_tokens - 1))
        found = self.pool.partial_hit(self._parent(seq, num_hits), token_ids)
        forked = self._forked_hit(seq, num_hits, token_ids)
        if forked is not None and (found is None or forked[1] > found[1]):
            found = forked
        return found if found is not None and found[1] > 0 else None

    def _forked_hit(
        self, seq: Sequence, num_hits: int, token_ids: list[int]
    ) -> tuple[BlockId, int] | None:
        """Block num_hits of the choice seq was forked from, while it runs, and how many
        of its computed tokens lead token_ids: a prompt's last block is never full, so
        the prefix cache does not hold it."""
        source, seq.fork_of = seq.fork_of, None  # only on the first admission
        if source is None or source.status is not SeqStatus.RUNNING:
            return None
        if num_hits < source.num_dropped_blocks or num_hits >= len(source.block_ids):
            return None
        start = num_hits * self.config.block_size
        computed = source.tokens(start, min(source.num_computed_tokens, start + len(token_ids)))
        n = next(
            (i for i, (a, b) in enumerate(zip(computed, token_ids, strict=False)) if a != b),
            len(computed),
        )
        return source.block_ids[num_hits], n

    def _may_hit(self, seq: Sequence) -> bool:
        """Whether seq may take cached blocks: not when it asks for its prompt's logprobs,
        which need the logits of every prompt position."""
        return self.config.enable_prefix_caching and seq.request.params.prompt_logprobs is None

    def _expire(self, plan: StepPlan, now_ts: float) -> None:
        for queue in self.waiting.values():
            for seq in [s for s in queue if _expired(s, now_ts)]:
                queue.remove(seq)
                self._release(seq)
                seq.status = SeqStatus.FINISHED
                plan.expired.append(seq)

    # ---- memory ------------------------------------------------------------

    def _reserve(self, seq: Sequence, num_new: int, plan: StepPlan) -> bool:
        """Blocks for seq's next num_new tokens, preempting others if needed.
        False when seq itself had to be preempted."""
        need = blocks_needed(seq.num_computed_tokens + num_new, self.config.block_size)
        while True:
            blocks = self.pool.allocate(need - len(seq.block_ids))
            if blocks is not None:
                seq.block_ids.extend(blocks)
                return True
            victim = max(self.running, key=lambda s: (s.priority, s.arrival_index))
            self._preempt(victim, plan)
            if victim is seq:
                return False

    def _preempt(self, seq: Sequence, plan: StepPlan) -> None:
        self.running.remove(seq)
        plan.scheduled = [s for s in plan.scheduled if s.seq is not seq]
        self._release(seq)
        seq.status = SeqStatus.WAITING
        self.waiting[seq.priority].appendleft(seq)
        plan.preempted.append(seq)
        self.num_preemptions += 1

    def _release(self, seq: Sequence) -> None:
        # Tail first: a sequence's last blocks are the least likely to be shared,
        # so they are the first the LRU queue evicts.
        self.pool.free(seq.block_ids[seq.num_dropped_blocks :][::-1])
        seq.block_ids = []
        seq.num_dropped_blocks = 0
        seq.num_computed_tokens = 0

    def _drop_slid_out_blocks(self, seq: Sequence, window: int) -> None:
        """Give back the blocks wholly before the oldest key seq's next query sees
        (position num_computed_tokens - window + 1): no later query reads them."""
        first_seen = seq.num_computed_tokens - window + 1
        keep_from = max(0, first_seen // self.config.block_size)
        if keep_from > seq.num_dropped_blocks:
            self.pool.free(seq.block_ids[seq.num_dropped_blocks : keep_from])
            seq.num_dropped_blocks = keep_from

    # ---- prefix cache names ---------------------------------------------------

    def _hash_known_blocks(self, seq: Sequence) -> None:
        bs = self.config.block_size
        for i in range(len(seq.block_hashes), seq.num_tokens // bs):
            parent = seq.block_hashes[-1] if seq.block_hashes else None
            tokens = seq.tokens(i * bs, (i + 1) * bs)
            seq.block_hashes.append(hash_block(parent, tokens, self.config.cache_salt))

    def _register_filled_blocks(self, seq: Sequence, num_new: int) -> None:
        """Name the blocks this step's num_new tokens completed."""
        bs = self.config.block_size
        first = (seq.num_computed_tokens - num_new) // bs
        last = seq.num_computed_tokens // bs
        if last > first:
            self._hash_known_blocks(seq)
            for i in range(first, last):
                tokens = seq.tokens(i * bs, (i + 1) * bs)
                parent = self._parent(seq, i)
                self.pool.register(seq.block_ids[i], seq.block_hashes[i], parent, tokens)

    def _parent(self, seq: Sequence, i: int) -> BlockHash:
        """What block i of seq follows: block i - 1's hash, or for the first block a
        name of this cache salt's root (a pool may serve several models)."""
        return seq.block_hashes[i - 1] if i else self._root


def _expired(seq: Sequence, now_ts: float) -> bool:
    deadline = seq.request.deadline_ts
    return deadline is not None and now_ts > deadline and seq.request.clock.scheduled_ts is None
