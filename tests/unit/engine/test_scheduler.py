"""Continuous batching on toy sizes: exact plans, exact block ids, no torch."""

from __future__ import annotations

from hypothesis import given, settings, target
from hypothesis import strategies as st

from vigil.engine.kv_cache import BlockPool, blocks_needed
from vigil.engine.request import (
    GenerationRequest,
    Priority,
    RequestClock,
    RequestId,
    SamplingParams,
)
from vigil.engine.scheduler import BlockCopy, Scheduler, SchedulerConfig, StepPlan
from vigil.engine.sequence import SeqStatus, Sequence

INTERACTIVE, BATCH = Priority.INTERACTIVE, Priority.BATCH
SAMPLED = 7  # every sampled token; the scheduler never looks at token values


def make_seq(
    rid: str, num_prompt: int, priority: Priority = INTERACTIVE, max_tokens: int = 64
) -> Sequence:
    request = GenerationRequest(
        RequestId(rid), list(range(100, 100 + num_prompt)), SamplingParams(max_tokens), priority
    )
    return Sequence(request, arrival_index=-1)


def make_scheduler(
    *, num_blocks: int = 16, block_size: int = 4, budget: int = 8, max_num_seqs: int = 4
) -> Scheduler:
    return Scheduler(SchedulerConfig(max_num_seqs, budget, block_size), BlockPool(num_blocks))


def step(scheduler: Scheduler) -> StepPlan:
    """One engine step with a fake runner: every chunk that reaches the end samples."""
    plan = scheduler.schedule()
    scheduler.release_copies(plan)  # as the engine does once it has copied them
    sampled = {s.seq.request_id: SAMPLED for s in plan.scheduled if s.samples}
    scheduler.update(plan, sampled)
    return plan


def shape(plan: StepPlan) -> list[tuple[str, int]]:
    return [(s.seq.request_id, s.num_new_tokens) for s in plan.scheduled]


def test_chunks_a_long_prompt_under_the_token_budget() -> None:
    sched = make_scheduler(budget=8, block_size=4)
    a, b = make_seq("a", 10), make_seq("b", 3)
    sched.add(a)
    sched.add(b)
    plan = step(sched)
    assert shape(plan) == [("a", 8)]  # the budget is spent on a's first chunk; b waits
    assert (a.block_ids, a.num_computed_tokens, a.output_ids) == ([0, 1], 8, [])
    assert list(sched.waiting[INTERACTIVE]) == [b]
    plan = step(sched)
    assert shape(plan) == [("a", 2), ("b", 3)]  # a's last chunk samples; b fits whole
    assert (a.output_ids, b.output_ids) == ([SAMPLED], [SAMPLED])
    assert (a.block_ids, b.block_ids) == ([0, 1, 2], [3])
    assert shape(step(sched)) == [("a", 1), ("b", 1)]  # both decode
    assert shape(step(sched)) == [("a", 1), ("b", 1)]
    assert (a.block_ids, b.block_ids) == ([0, 1, 2], [3, 4])  # b's 5th token opened a block


def test_running_sequences_are_fed_before_waiting_prompts() -> None:
    sched = make_scheduler(budget=8)
    sched.add(make_seq("a", 3))
    assert shape(step(sched)) == [("a", 3)]
    sched.add(make_seq("b", 20))
    assert shape(step(sched)) == [("a", 1), ("b", 7)]  # b gets what the decode left
    assert shape(step(sched)) == [("a", 1), ("b", 7)]


def test_max_num_seqs_caps_the_running_set() -> None:
    sched = make_scheduler(budget=100, max_num_seqs=2)
    a, b, c = make_seq("a", 2), make_seq("b", 2), make_seq("c", 2)
    for seq in (a, b, c):
        sched.add(seq)
    assert shape(step(sched)) == [("a", 2), ("b", 2)]
    assert shape(step(sched)) == [("a", 1), ("b", 1)]
    assert c.status is SeqStatus.WAITING and c.block_ids == []
    sched.finish(a)
    assert shape(step(sched)) == [("b", 1), ("c", 2)]


def test_interactive_is_admitted_before_batch() -> None:
    sched = make_scheduler(budget=4)
    sched.add(make_seq("x", 4, BATCH))
    sched.add(make_seq("y", 4, INTERACTIVE))
    assert shape(step(sched)) == [("y", 4)]
    assert shape(step(sched)) == [("y", 1), ("x", 3)]

    sched = make_scheduler(budget=100)
    sched.add(make_seq("x", 4, BATCH))
    sched.add(make_seq("y", 4, INTERACTIVE))
    assert shape(step(sched)) == [("y", 4), ("x", 4)]


def test_first_come_first_served_within_a_class() -> None:
    sched = make_scheduler(budget=8)
    for rid in ("a", "b", "c"):
        sched.add(make_seq(rid, 4))
    assert shape(step(sched)) == [("a", 4), ("b", 4)]
    assert shape(step(sched)) == [("a", 1), ("b", 1), ("c", 4)]


def test_head_of_the_queue_waits_for_blocks_and_nothing_jumps_it() -> None:
    sched = make_scheduler(num_blocks=3, block_size=4, budget=100)
    a, b, c, d = make_seq("a", 8), make_seq("b", 8), make_seq("c", 2), make_seq("d", 2, BATCH)
    for seq in (a, b, c, d):
        sched.add(seq)
    # b needs two blocks and one is free: c and d would fit but stay behind b.
    assert shape(step(sched)) == [("a", 8)]
    assert shape(step(sched)) == [("a", 1)]  # a's 9th token takes the last block
    assert (a.block_ids, sched.pool.num_free) == ([0, 1, 2], 0)
    sched.finish(a)
    assert shape(step(sched)) == [("b", 8), ("c", 2)]  # d waits: no block left


def test_preempts_newest_when_out_of_blocks() -> None:
    sched = make_scheduler(num_blocks=4, block_size=2, budget=16, max_num_seqs=2)
    a, b, c = make_seq("a", 3), make_seq("b", 3), make_seq("c", 3)
    for seq in (a, b, c):
        sched.add(seq)
    assert shape(step(sched)) == [("a", 3), ("b", 3)]  # c: max_num_seqs
    assert shape(step(sched)) == [("a", 1), ("b", 1)]  # 4 tokens each: still 2 blocks
    assert (a.block_ids, b.block_ids, sched.pool.num_free) == ([0, 1], [2, 3], 0)

    plan = step(sched)  # a's 5th token needs a third block: b, the newest, makes room
    assert shape(plan) == [("a", 1)]
    assert plan.preempted == [b]
    assert (b.status, b.block_ids, b.num_computed_tokens) == (SeqStatus.WAITING, [], 0)
    assert b.output_ids == [SAMPLED, SAMPLED]  # kept, and recomputed with the prompt later
    assert list(sched.waiting[INTERACTIVE]) == [b, c]  # back at the head, ahead of c
    assert a.block_ids == [0, 1, 3]  # b freed tail first: its last block went first
    assert sched.num_preemptions == 1

    assert shape(step(sched)) == [("a", 1)]  # b's 5 tokens need 3 blocks; 1 is free
    sched.finish(a)
    plan = step(sched)
    assert shape(plan) == [("b", 5)]  # prompt and both outputs, recomputed in one chunk
    assert b.output_ids == [SAMPLED] * 3  # the recompute ends on a new token
    assert b.block_ids == [2, 3, 1]
    assert c.status is SeqStatus.WAITING  # two blocks needed, one free


def test_preempts_lower_priority_before_newer_interactive() -> None:
    sched = make_scheduler(num_blocks=4, block_size=2, budget=16, max_num_seqs=2)
    x, y = make_seq("x", 3, BATCH), make_seq("y", 3, INTERACTIVE)
    sched.add(x)  # x arrived first, but it is batch
    sched.add(y)
    assert shape(step(sched)) == [("y", 3), ("x", 3)]
    assert shape(step(sched)) == [("y", 1), ("x", 1)]
    plan = step(sched)  # y needs a third block: x goes, though it is older
    assert shape(plan) == [("y", 1)]
    assert plan.preempted == [x]
    assert list(sched.waiting[BATCH]) == [x]


def test_sequence_that_needs_a_block_preempts_itself_when_it_is_the_lowest() -> None:
    sched = make_scheduler(num_blocks=4, block_size=2, budget=16, max_num_seqs=2)
    x, y = make_seq("x", 4, BATCH), make_seq("y", 3, INTERACTIVE)
    sched.add(x)
    sched.add(y)
    assert shape(step(sched)) == [("y", 3), ("x", 4)]
    plan = step(sched)  # x's 5th token needs a third block; x itself is the victim
    assert shape(plan) == [("y", 1)]
    assert plan.preempted == [x]
    assert (x.status, x.num_computed_tokens, y.block_ids) == (SeqStatus.WAITING, 0, [0, 1])


def test_preempted_sequence_is_not_readmitted_in_the_same_step() -> None:
    # One token per block, so every step's block needs are plain to count.
    sched = make_scheduler(num_blocks=6, block_size=1, budget=3, max_num_seqs=2)
    a, b = make_seq("a", 2), make_seq("b", 2)
    sched.add(a)
    sched.add(b)
    assert shape(step(sched)) == [("a", 2), ("b", 1)]
    assert shape(step(sched)) == [("a", 1), ("b", 1)]  # b's prompt done: it samples
    assert sched.pool.num_free == 1
    plan = step(sched)  # a takes the last block; b then has none and is the newest
    assert shape(plan) == [("a", 1)]
    assert plan.preempted == [b]
    # b's two freed blocks would hold a 2-token chunk of its recompute, but admitting it
    # now would only thrash: admission waits for the next step.
    assert (b.status, sched.pool.num_free) == (SeqStatus.WAITING, 2)
    sched.finish(a)
    assert shape(step(sched)) == [("b", 3)]


def test_finished_sequence_frees_its_blocks_for_the_next_step() -> None:
    sched = make_scheduler(num_blocks=2, block_size=4, budget=100)
    a, b = make_seq("a", 8), make_seq("b", 4)
    sched.add(a)
    sched.add(b)
    assert shape(step(sched)) == [("a", 8)]
    assert sched.pool.num_free == 0
    sched.finish(a)
    assert (a.status, a.block_ids, sched.pool.num_free) == (SeqStatus.FINISHED, [], 2)
    assert sched.running == []
    assert shape(step(sched)) == [("b", 4)]
    # a's blocks went back tail first, so its last block is the first reused
    assert b.block_ids == [1]


def test_finishing_a_waiting_sequence_takes_it_out_of_its_queue() -> None:
    sched = make_scheduler(max_num_seqs=1)
    a, b = make_seq("a", 2), make_seq("b", 2, BATCH)
    sched.add(a)
    sched.add(b)
    step(sched)
    assert b in sched.waiting[BATCH]
    sched.finish(b)
    assert b not in sched.waiting[BATCH]
    assert sched.num_waiting == 0 and b.status is SeqStatus.FINISHED
    sched.finish(a)
    assert not sched.has_work()
    assert sched.pool.num_free == sched.pool.num_blocks


# --- Property: no interleaving of add / step / finish leaks or double-frees a block. -----

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 12), st.integers(1, 6), st.sampled_from(Priority)),
        st.tuples(st.just("step")),
        st.tuples(st.just("finish"), st.integers(0, 31)),
    ),
    min_size=4,
    max_size=60,
)


def _check_invariants(sched: Scheduler, live: list[Sequence]) -> None:
    pool, bs = sched.pool, sched.config.block_size
    owned = [b for seq in live for b in seq.block_ids[seq.num_dropped_blocks :]]
    assert len(set(owned)) == pool.num_used  # no block lost
    assert sum(pool._ref_counts) == len(owned)  # one reference per holder
    assert min(pool._ref_counts) >= 0
    if not sched.config.enable_prefix_caching:
        assert len(owned) == len(set(owned))  # only the prefix cache shares blocks
    assert len(sched.running) <= sched.config.max_num_seqs
    for seq in live:
        if seq.status is SeqStatus.RUNNING:
            assert seq in sched.running
            assert len(seq.block_ids) == blocks_needed(seq.num_computed_tokens, bs)
            window = sched.config.sliding_window
            if window is not None:  # no block kept that the next query cannot see
                assert seq.num_dropped_blocks == max(
                    0, (seq.num_computed_tokens - window + 1) // bs
                )
        else:
            assert seq.status is SeqStatus.WAITING
            assert seq in sched.waiting[seq.priority]
            assert (seq.block_ids, seq.num_computed_tokens) == ([], 0)


def _step_and_retire(sched: Scheduler, live: list[Sequence]) -> StepPlan:
    plan = sched.schedule()
    assert plan.num_tokens <= sched.config.max_num_batched_tokens
    scheduled = [s.seq for s in plan.scheduled]
    assert len(scheduled) == len(set(map(id, scheduled)))
    assert all(s.status is SeqStatus.RUNNING for s in scheduled)
    assert not any(p in scheduled for p in plan.preempted)
    for item in plan.scheduled:
        end = item.seq.num_computed_tokens + item.num_new_tokens
        assert len(item.seq.block_ids) >= blocks_needed(end, sched.config.block_size)
    bs = sched.config.block_size
    for copy in plan.copies:  # into a scheduled sequence's block, from one the pool holds
        (item,) = [
            s for s in plan.scheduled if copy.dst in s.seq.block_ids[s.seq.num_dropped_blocks :]
        ]
        assert item.seq.block_ids.index(copy.dst) == item.seq.num_computed_tokens // bs
        assert 0 < copy.num_tokens == item.seq.num_computed_tokens % bs
        assert sched.pool.ref_count(copy.src) > 0 and copy.src not in item.seq.block_ids
    sched.release_copies(plan)  # as the engine does once it has copied them
    sched.update(plan, {s.seq.request_id: SAMPLED for s in plan.scheduled if s.samples})
    for seq in scheduled:  # the engine's max_tokens rule
        if len(seq.output_ids) >= seq.request.params.max_tokens:
            sched.finish(seq)
            live.remove(seq)
    return plan


@settings(max_examples=200, deadline=None)
@given(
    ops=_ops,
    num_blocks=st.integers(2, 6),
    block_size=st.sampled_from([1, 2, 3]),
    budget=st.integers(1, 16),
    max_num_seqs=st.integers(1, 4),
    caching=st.booleans(),
    window=st.sampled_from([None, 1, 2, 5]),
)
def test_random_operations_never_leak_blocks(
    ops: list[tuple],
    num_blocks: int,
    block_size: int,
    budget: int,
    max_num_seqs: int,
    caching: bool,
    window: int | None,
) -> None:
    # Every prompt starts with the same tokens, so with caching on they share blocks.
    config = SchedulerConfig(
        max_num_seqs, budget, block_size, enable_prefix_caching=caching, sliding_window=window
    )
    sched = Scheduler(config, BlockPool(num_blocks))
    capacity = num_blocks * block_size
    live: list[Sequence] = []
    for n, op in enumerate(ops):
        if op[0] == "add":
            # The engine rejects a request that could not fit in the whole cache.
            num_prompt = min(op[1], capacity - 1)
            max_tokens = min(op[2], capacity - num_prompt)
            live.append(make_seq(f"r{n}", num_prompt, op[3], max_tokens))
            sched.add(live[-1])
        elif op[0] == "step":
            _step_and_retire(sched, live)
        elif live:
            seq = live.pop(op[1] % len(live))  # abort
            sched.finish(seq)
        _check_invariants(sched, live)
    # With nothing new arriving, every sequence runs to its max_tokens: no livelock, and
    # no step is empty while there is work.
    for _ in range(1000):
        if not sched.has_work():
            break
        assert not _step_and_retire(sched, live).is_empty
        _check_invariants(sched, live)
    assert live == [] and not sched.has_work()
    # Steer the search toward runs that preempt a lot (about a third of the examples).
    target(float(sched.num_preemptions))
    assert sched.pool.num_free == num_blocks


def test_blocks_that_slid_out_of_every_window_are_given_back() -> None:
    # Window 6, blocks of 4: after a 13-token prompt the next query (position 13) sees
    # positions 8..13, so blocks 0 (0..3) and 1 (4..7) go back to the pool.
    config = SchedulerConfig(2, 16, 4, sliding_window=6)
    sched = Scheduler(config, BlockPool(6))
    a = make_seq("a", 13, max_tokens=8)
    sched.add(a)
    step(sched)
    assert (a.block_ids, a.num_dropped_blocks, sched.pool.num_free) == ([0, 1, 2, 3], 2, 4)
    for _ in range(3):  # positions 13, 14, 15 computed: the next query sees 10..15
        step(sched)
    assert (a.num_computed_tokens, a.num_dropped_blocks) == (16, 2)
    step(sched)  # position 16 needs block 4; the next query sees 11..16: block 2 goes
    assert (a.block_ids, a.num_dropped_blocks, sched.pool.num_free) == ([0, 1, 2, 3, 4], 3, 4)
    # b's 9 tokens need 3 blocks: 6 could not hold a's 5 and them without what a gave back.
    b = make_seq("b", 9)
    sched.add(b)
    step(sched)
    assert set(b.block_ids) <= {0, 1, 2, 5} and sched.num_preemptions == 0
    sched.finish(a)
    sched.finish(b)
    assert sched.pool.num_free == 6  # each block freed once


# ---- prefix cache, deadlines, aging ---------------------------------------------------


def caching_scheduler(num_blocks: int = 16, budget: int = 64) -> Scheduler:
    config = SchedulerConfig(4, budget, 4, enable_prefix_caching=True, cache_salt="m@1")
    return Scheduler(config, BlockPool(num_blocks))


def seq_with(
    rid: str,
    tokens: list[int],
    priority: Priority = INTERACTIVE,
    arrival_ts: float = 0.0,
    deadline_ts: float | None = None,
) -> Sequence:
    request = GenerationRequest(
        RequestId(rid), tokens, SamplingParams(8), priority, RequestClock(arrival_ts), deadline_ts
    )
    return Sequence(request, arrival_index=-1)


def test_identical_prompt_reuses_cached_blocks_and_computes_only_its_last_token() -> None:
    sched = caching_scheduler()
    a = seq_with("a", list(range(8)))  # two full blocks of 4
    sched.add(a)
    step(sched)
    sched.finish(a)
    b = seq_with("b", list(range(8)))
    sched.add(b)
    plan = step(sched)
    # Both blocks come from the cache; the last token is fed again for its logits.
    assert shape(plan) == [("b", 1)]
    assert b.block_ids[:2] == [0, 1]
    assert (sched.num_prefix_queried_tokens, sched.num_prefix_hit_tokens) == (16, 7)


def test_shared_leading_blocks_are_reused_and_the_rest_computed() -> None:
    sched = caching_scheduler()
    system = [1, 2, 3, 4, 5, 6, 7, 8]
    a = seq_with("a", [*system, 50, 51])
    sched.add(a)
    step(sched)  # a keeps running: its blocks are shared, not just cached
    b = seq_with("b", [*system, 60, 61, 62])
    sched.add(b)
    plan = step(sched)
    assert shape(plan) == [("a", 1), ("b", 3)]
    assert b.block_ids[:2] == a.block_ids[:2]
    assert [sched.pool.ref_count(blk) for blk in b.block_ids[:2]] == [2, 2]
    assert b.block_ids[2] not in a.block_ids


def test_a_block_matching_only_in_its_first_tokens_is_copied_not_recomputed() -> None:
    sched = caching_scheduler()
    a = seq_with("a", list(range(8)))  # blocks [0 1 2 3] [4 5 6 7]
    sched.add(a)
    step(sched)
    a_blocks = list(a.block_ids)
    sched.finish(a)
    b = seq_with("b", [0, 1, 2, 3, 4, 5, 90, 91, 92])
    sched.add(b)
    plan = sched.schedule()
    # Block 0 is a hit; 4 and 5 are copied from a's second block; 90, 91, 92 computed.
    assert shape(plan) == [("b", 3)] and b.num_computed_tokens == 6
    assert plan.copies == [BlockCopy(a_blocks[1], b.block_ids[1], 2)]
    assert sched.pool.ref_count(plan.copies[0].src) == 1  # held until copied
    assert sched.num_prefix_hit_tokens == b.num_cached_prompt_tokens == 6
    sched.release_copies(plan)
    assert sched.pool.ref_count(plan.copies[0].src) == 0


def test_a_partial_hit_never_takes_the_last_token() -> None:
    sched = caching_scheduler()
    a = seq_with("a", list(range(8)))
    sched.add(a)
    step(sched)
    sched.finish(a)
    b = seq_with("b", list(range(7)))  # all cached, but its last token's logits are needed
    sched.add(b)
    plan = step(sched)
    assert shape(plan) == [("b", 1)] and [c.num_tokens for c in plan.copies] == [2]


def test_a_different_salt_never_matches() -> None:
    pool = BlockPool(16)
    one = Scheduler(SchedulerConfig(4, 64, 4, True, "model@1"), pool)
    a = seq_with("a", list(range(8)))
    one.add(a)
    step(one)
    one.finish(a)
    other = Scheduler(SchedulerConfig(4, 64, 4, True, "model@2"), pool)
    b = seq_with("b", list(range(8)))
    other.add(b)
    assert shape(step(other)) == [("b", 8)]


def test_prefix_cache_off_computes_everything() -> None:
    sched = make_scheduler(budget=64)
    for rid in ("a", "b"):
        seq = seq_with(rid, list(range(8)))
        sched.add(seq)
        assert shape(step(sched)) == [(rid, 8)]
        sched.finish(seq)
    assert sched.num_prefix_hit_tokens == 0


def test_request_waiting_past_its_deadline_expires_without_starting() -> None:
    sched = make_scheduler(max_num_seqs=1)
    a = seq_with("a", [1, 2], deadline_ts=10.0)
    b = seq_with("b", [3, 4], deadline_ts=5.0)
    sched.add(a)
    sched.add(b)
    a.request.clock.scheduled_ts = 1.0  # what the engine records when a starts
    assert shape(sched.schedule(1.0)) == [("a", 2)]
    plan = sched.schedule(6.0)  # b waited past its deadline behind max_num_seqs
    assert plan.expired == [b] and b.status is SeqStatus.FINISHED
    assert sched.num_waiting == 0
    # a started before its deadline: it is never expired
    assert sched.schedule(11.0).expired == []


def test_waiting_batch_request_goes_first_once_it_has_aged() -> None:
    config = SchedulerConfig(1, 64, 4, batch_aging_s=5.0)
    sched = Scheduler(config, BlockPool(16))
    old_batch = seq_with("batch", [1, 2], BATCH, arrival_ts=0.0)
    fresh = seq_with("interactive", [3, 4], INTERACTIVE, arrival_ts=4.0)
    sched.add(old_batch)
    sched.add(fresh)
    assert shape(sched.schedule(4.0)) == [("interactive", 2)]  # batch has waited 4 s < 5 s
    sched.finish(fresh)
    late = seq_with("late", [5, 6], INTERACTIVE, arrival_ts=6.0)
    sched.add(late)
    assert shape(sched.schedule(6.0)) == [("batch", 2)]  # waited 6 s: it goes first
