"""A request's lease: counted where it stands while open, closed exactly once however
the request ends, and the one source of the load counts and request metrics."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry

from vigil.engine.request import (
    FinishEvent,
    FinishReason,
    Priority,
    RequestClock,
    RequestId,
    TokenEvent,
)
from vigil.platform.forecast.costs import DecodePoint, StepCosts
from vigil.platform.forecast.first_token import EngineLoad, Waiting
from vigil.platform.gateway.lease import LeaseState, LoadBook
from vigil.platform.telemetry.context import RequestContext
from vigil.platform.telemetry.live import LiveSeries
from vigil.platform.telemetry.metrics import Metrics
from vigil.platform.telemetry.recorder import RequestRecorder

I, B = Priority.INTERACTIVE, Priority.BATCH  # noqa: E741
COSTS = StepCosts((DecodePoint(1, 0.02),), 0.0, 0.0, 0.001, 0.0)
LIMITS = (8, 512)  # max_num_seqs, max_num_batched_tokens


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def book(registry: CollectorRegistry) -> LoadBook:
    return LoadBook(RequestRecorder(Metrics(registry), LiveSeries()))


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def open_lease(
    book: LoadBook,
    rid: str,
    *,
    replica: str = "w1",
    priority: Priority = I,
    prompt: int = 100,
    max_tokens: int = 16,
    arrival_ts: float | None = None,
):  # type: ignore[no-untyped-def]
    clock = RequestClock(time.monotonic() if arrival_ts is None else arrival_ts)
    return book.open(
        RequestId(rid), "chat", "m@1", "m@1", replica, priority, prompt, max_tokens, clock
    )


def token(ts: float, n: int = 1) -> TokenEvent:
    return TokenEvent("x" * n, tuple(range(n)), ts)


def finish(reason: FinishReason, clock: RequestClock, prompt: int = 100) -> FinishEvent:
    return FinishEvent(reason, "", prompt, 3, clock)


def test_open_leases_are_queued_until_their_first_event_then_running(book: LoadBook) -> None:
    now = time.monotonic()
    a = open_lease(book, "a", arrival_ts=now - 2.0)
    open_lease(book, "b", priority=B, prompt=300, arrival_ts=now - 1.0)
    open_lease(book, "c", replica="w2", prompt=50, arrival_ts=now - 3.0)
    snap = book.snapshot("m@1", "w1", LIMITS, COSTS, now_ts=now)
    # The queue counts every replica's; the engine forecast is the one replica's.
    assert snap.queued == {I: 2, B: 1}
    assert snap.oldest_queued_s == {I: pytest.approx(3.0), B: pytest.approx(1.0)}
    assert snap.engine == EngineLoad(8, 512, (), (Waiting(I, 100, 16), Waiting(B, 300, 16)))
    assert snap.costs is COSTS  # passed through
    a.observe(token(now))
    a.observe(token(now + 0.1))  # a second event starts nothing more
    snap = book.snapshot("m@1", "w1", LIMITS, COSTS)
    assert snap.queued == {I: 1, B: 1} and snap.engine.running == (14,)  # 2 of 16 produced


def test_tokens_left_are_estimated_from_recent_answers(book: LoadBook) -> None:
    def answered(rid: str, num_tokens: int, max_tokens: int = 100) -> None:
        lease = open_lease(book, rid, max_tokens=max_tokens)
        lease.observe(token(time.monotonic(), n=num_tokens))
        lease.observe(finish(FinishReason.STOP, lease.clock))

    # Nothing answered yet: every request is assumed to run to its max_tokens.
    cold = open_lease(book, "cold", max_tokens=100)
    assert book.snapshot("m@1", "w1", LIMITS, COSTS).engine.waiting[0].num_output_tokens == 100
    cold.close()  # left: its length says nothing
    for i, n in enumerate((10, 20, 30, 90)):
        answered(f"a{i}", n)
    queued = open_lease(book, "q", max_tokens=100)
    capped = open_lease(book, "capped", max_tokens=15)
    running = open_lease(book, "r", max_tokens=100)
    running.observe(token(time.monotonic(), n=25))
    engine = book.snapshot("m@1", "w1", LIMITS, COSTS).engine
    # Queued: the mean answer (37.5, rounded); capped at 15: min(o, 15) of each, 13.75.
    assert [w.num_output_tokens for w in engine.waiting] == [38, 14]
    # Running past 25 tokens: the mean of the answers longer than that (30, 90) less 25.
    assert engine.running == (35,)
    running.observe(token(time.monotonic(), n=70))  # longer than every answer: its cap
    assert book.snapshot("m@1", "w1", LIMITS, COSTS).engine.running == (5,)
    for lease in (queued, capped, running):
        lease.close()


def test_a_first_token_is_held_to_its_forecast_on_metrics(
    book: LoadBook, registry: CollectorRegistry
) -> None:
    clock = RequestClock(100.0)
    lease = book.open(RequestId("a"), "chat", "m@1", "m@1", "w1", I, 10, 16, clock, 0.5)
    lease.observe(token(100.75))
    ratio = "vigil_admission_ttft_forecast_ratio"
    assert value(registry, f"{ratio}_sum", deployment="chat", version="m@1") == pytest.approx(1.5)
    assert value(registry, f"{ratio}_bucket", deployment="chat", version="m@1", le="1.5") == 1
    assert value(registry, f"{ratio}_bucket", deployment="chat", version="m@1", le="1.25") == 0
    unforecast = book.open(RequestId("b"), "chat", "m@1", "m@1", "w1", I, 10, 16, RequestClock(0))
    unforecast.observe(token(1.0))
    assert value(registry, f"{ratio}_count", deployment="chat", version="m@1") == 1


def test_replica_counts_split_in_flight_and_prompt_tokens_awaiting_prefill(book: LoadBook) -> None:
    a = open_lease(book, "a", replica="w1", prompt=100)
    open_lease(book, "b", replica="w1", prompt=50)
    open_lease(book, "c", replica="w2", prompt=700)
    a.observe(token(time.monotonic()))  # its prompt is prefilled now
    counts = book.replica_counts("m@1")
    assert (counts["w1"].num_in_flight, counts["w1"].num_pending_prompt_tokens) == (2, 50)
    assert (counts["w2"].num_in_flight, counts["w2"].num_pending_prompt_tokens) == (1, 700)
    assert book.replica_counts("other@1") == {}


def test_a_finish_closes_the_lease_once_and_records_its_outcome(
    book: LoadBook, registry: CollectorRegistry
) -> None:
    lease = open_lease(book, "a", arrival_ts=time.monotonic() - 1.0)
    lease.observe(token(lease.clock.arrival_ts + 0.25))
    lease.observe(token(lease.clock.arrival_ts + 0.5, n=2))
    lease.observe(finish(FinishReason.LENGTH, lease.clock))
    lease.close()  # the stream's clean-up after the finish: nothing more is counted
    assert lease.state is LeaseState.CLOSED and book.num_open() == 0
    assert (
        value(registry, "vigil_requests_total", deployment="chat", version="m@1", outcome="length")
        == 1
    )
    assert (
        value(registry, "vigil_requests_total", deployment="chat", version="m@1", outcome="abort")
        == 0
    )
    assert value(registry, "vigil_generation_tokens_total", deployment="chat", version="m@1") == 3
    assert value(registry, "vigil_prompt_tokens_total", deployment="chat", version="m@1") == 100
    ttft = "vigil_time_to_first_token_seconds"
    assert value(registry, f"{ttft}_sum", deployment="chat", version="m@1") == pytest.approx(0.25)
    itl = "vigil_inter_token_latency_seconds"
    assert value(registry, f"{itl}_sum", deployment="chat", version="m@1") == pytest.approx(0.25)
    assert (
        value(registry, "vigil_e2e_request_latency_seconds_count", deployment="chat", version="m@1")
        == 1
    )
    assert lease.clock.first_token_ts == pytest.approx(lease.clock.arrival_ts + 0.25)


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [
        (FinishReason.STOP, "stop"),
        (FinishReason.TIMEOUT, "timed_out"),
        (FinishReason.ERROR, "error"),
        (FinishReason.ABORT, "abort"),
    ],
)
def test_every_finish_reason_has_its_outcome(
    book: LoadBook, registry: CollectorRegistry, reason: FinishReason, outcome: str
) -> None:
    lease = open_lease(book, "a")
    lease.observe(finish(reason, lease.clock))
    assert (
        value(registry, "vigil_requests_total", deployment="chat", version="m@1", outcome=outcome)
        == 1
    )


def test_a_lease_left_before_its_finish_ends_as_aborted_and_leaves_every_count(
    book: LoadBook, registry: CollectorRegistry
) -> None:
    queued = open_lease(book, "queued")
    running = open_lease(book, "running")
    running.observe(token(time.monotonic()))
    queued.close()
    running.close()
    running.close()
    assert book.num_open() == 0 and book.replica_counts("m@1") == {}
    snap = book.snapshot("m@1", "w1", LIMITS, None)
    assert sum(snap.queued.values()) == 0 and snap.engine.idle
    assert (
        value(registry, "vigil_requests_total", deployment="chat", version="m@1", outcome="abort")
        == 2
    )
    with pytest.raises(AssertionError, match="event after close"):
        running.observe(token(time.monotonic()))


def test_a_stream_its_client_left_keeps_its_prompt_tokens(
    book: LoadBook, registry: CollectorRegistry
) -> None:
    """No finish event comes back for a client that left: its access line has the prompt
    the gateway sent; the metric counts it once a first token showed it was processed."""
    contexts = {rid: RequestContext("POST", "/v1/chat/completions") for rid in ("q", "r")}
    leases = {
        rid: book.open(
            RequestId(rid),
            "chat",
            "m@1",
            "m@1",
            "w1",
            I,
            prompt,
            16,
            RequestClock(time.monotonic()),
            context=contexts[rid],
        )
        for rid, prompt in (("q", 40), ("r", 100))
    }
    leases["r"].observe(token(time.monotonic()))
    for lease in leases.values():
        lease.close()
    fields = {rid: c.fields for rid, c in contexts.items()}
    assert fields["q"]["outcome"] == "abort" and fields["q"]["prompt_tokens"] == 40
    assert fields["r"]["outcome"] == "abort" and fields["r"]["prompt_tokens"] == 100
    assert value(registry, "vigil_prompt_tokens_total", deployment="chat", version="m@1") == 100


def test_a_lease_of_n_choices_counts_n_sequences_and_closes_after_the_last(
    book: LoadBook,
) -> None:
    clock = RequestClock(time.monotonic())
    lease = book.open(RequestId("n3"), "chat", "m@1", "m@1", "w1", I, 100, 16, clock, num_seqs=3)
    waiting = book.snapshot("m@1", "w1", LIMITS, COSTS).engine.waiting
    # The prompt once in full; the later choices find it in the prefix cache.
    assert [(w.num_prompt_tokens, w.num_cached_tokens) for w in waiting] == [
        (100, 0),
        (100, 100),
        (100, 100),
    ]
    lease.observe(TokenEvent("a", (1,), time.monotonic(), index=0))
    lease.observe(TokenEvent("b", (2,), time.monotonic(), index=1))
    assert len(book.snapshot("m@1", "w1", LIMITS, COSTS).engine.running) == 3
    lease.observe(FinishEvent(FinishReason.STOP, "", 100, 1, clock, index=0))
    assert len(book.snapshot("m@1", "w1", LIMITS, COSTS).engine.running) == 2
    lease.observe(FinishEvent(FinishReason.LENGTH, "", 100, 1, clock, index=1))
    assert lease.state is LeaseState.RUNNING
    lease.observe(FinishEvent(FinishReason.STOP, "", 100, 0, clock, index=2))
    assert lease.state is LeaseState.CLOSED and book.num_open() == 0


def test_a_failed_choice_closes_the_lease_of_every_choice(book: LoadBook) -> None:
    clock = RequestClock(time.monotonic())
    lease = book.open(RequestId("f"), "chat", "m@1", "m@1", "w1", I, 100, 16, clock, num_seqs=2)
    lease.observe(FinishEvent(FinishReason.ERROR, "", 100, 0, clock, "boom", index=1))
    assert lease.state is LeaseState.CLOSED and book.num_open() == 0
