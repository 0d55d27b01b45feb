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
from vigil.platform.gateway.lease import LeaseState, LoadBook
from vigil.platform.telemetry.live import LiveSeries
from vigil.platform.telemetry.metrics import Metrics
from vigil.platform.telemetry.recorder import RequestRecorder

I, B = Priority.INTERACTIVE, Priority.BATCH  # noqa: E741


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
    arrival_ts: float | None = None,
):  # type: ignore[no-untyped-def]
    clock = RequestClock(time.monotonic() if arrival_ts is None else arrival_ts)
    return book.open(RequestId(rid), "chat", "m@1", "m@1", replica, priority, prompt, clock)


def token(ts: float, n: int = 1) -> TokenEvent:
    return TokenEvent("x" * n, tuple(range(n)), ts)


def finish(reason: FinishReason, clock: RequestClock, prompt: int = 100) -> FinishEvent:
    return FinishEvent(reason, "", prompt, 3, clock)


def test_open_leases_are_queued_until_their_first_event_then_running(book: LoadBook) -> None:
    now = time.monotonic()
    a = open_lease(book, "a", arrival_ts=now - 2.0)
    open_lease(book, "b", priority=B, prompt=300, arrival_ts=now - 1.0)
    snap = book.snapshot("m@1", 8, 2000.0, 0.05, now_ts=now)
    assert snap.queued == {I: 1, B: 1} and snap.queued_prompt_tokens == {I: 100, B: 300}
    assert snap.oldest_queued_s == {I: pytest.approx(2.0), B: pytest.approx(1.0)}
    assert (snap.num_running, snap.max_num_seqs, snap.starts_per_s) == (0, 8, None)
    assert (snap.prefill_tokens_per_s, snap.decode_step_s) == (2000.0, 0.05)  # passed through
    a.observe(token(now))
    a.observe(token(now + 0.1))  # a second event starts nothing more
    snap = book.snapshot("m@1", 8, None, None)
    assert snap.queued == {I: 0, B: 1} and snap.num_running == 1
    assert snap.starts_per_s == pytest.approx(0.1)  # one start in the 10 s window
    assert book.snapshot("m@1", 8, None, None, now_ts=time.monotonic() + 11).starts_per_s is None


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
    snap = book.snapshot("m@1", 8, None, None)
    assert sum(snap.queued.values()) == 0 and snap.num_running == 0
    assert (
        value(registry, "vigil_requests_total", deployment="chat", version="m@1", outcome="abort")
        == 2
    )
    with pytest.raises(AssertionError, match="event after close"):
        running.observe(token(time.monotonic()))


def test_admission_learns_how_late_first_tokens_come_against_its_predictions(
    book: LoadBook,
) -> None:
    def served(rid: str, predicted: float | None, ttft: float, priority: Priority = I) -> None:
        clock = RequestClock(100.0)
        lease = book.open(
            RequestId(rid), "chat", "m@1", "m@1", "w1", priority, 10, clock, predicted
        )
        lease.observe(token(100.0 + ttft))
        lease.observe(finish(FinishReason.LENGTH, clock))

    assert book.snapshot("m@1", 8, None, None).ttft_correction == 1.0  # nothing learnt yet
    served("early", 1.0, 0.5)  # faster than predicted: never below 1
    assert book.snapshot("m@1", 8, None, None).ttft_correction == 1.0
    served("tiny", 0.01, 0.3)  # fixed costs over a tiny prediction: not learnt from
    served("batch", 0.5, 5.0, priority=B)  # a batch request waits behind interactive ones
    assert book.snapshot("m@1", 8, None, None).ttft_correction == 1.0
    for i in range(10):
        served(f"late{i}", 0.5, 1.5 if i != 4 else 1.0)  # three times later, at worst
    assert book.snapshot("m@1", 8, None, None).ttft_correction == pytest.approx(3.0)
    served("very-late", 0.5, 50.0)
    assert book.snapshot("m@1", 8, None, None).ttft_correction == 4.0  # bounded
    for i in range(32):
        served(f"on-time{i}", 0.5, 0.6)  # the outlier has left the last 32
    assert book.snapshot("m@1", 8, None, None).ttft_correction == pytest.approx(1.2)
