"""One request's life in the gateway, and every load count read from the live ones.

    open (admitted, sent to a worker) --first event back--> running --end--> closed
              queued: waiting in a worker's queue, or on its way there

A lease is opened when admission lets a request in, and closed exactly once however the
request ends: the finish event of its last choice (or of any choice that failed), the
client leaving, a worker failing mid-stream, or the stream never being read. A request
of n choices counts as n sequences wherever the engine's batch is counted (running,
waiting); its prompt is counted once in full, its later choices' as cached. It owns
every counter of its request: admission's snapshot (queued by class, the oldest wait,
and each replica's engine as the forecast reads it: the running sequences with the
tokens they have left, the waiting prompts) and the router's replica loads (in flight,
prompt tokens awaiting their first token) are read from the open leases, so a request
is counted in one place and gone from every count at once. Metrics are written from
it as it moves, from the request's own clock.

How many tokens a request will still produce is not known until it stops: it is
estimated from the lengths of the engine's last OUTPUT_SAMPLES answers (each capped
by the request's own max_tokens), as the mean of those longer than what it has
produced so far, less that; its max_tokens when none is (or none is known yet: a cold
engine is assumed to run every request to its cap, which keeps a first burst's
forecast on the safe side).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from vigil.engine.request import (
    EngineEvent,
    FinishEvent,
    FinishReason,
    Priority,
    RequestClock,
    RequestId,
    TokenEvent,
)
from vigil.platform.forecast.costs import StepCosts
from vigil.platform.forecast.first_token import EngineLoad, Waiting
from vigil.platform.gateway.admission import LoadSnapshot
from vigil.platform.telemetry.context import RequestContext
from vigil.platform.telemetry.recorder import Outcome, RequestRecord, RequestRecorder, shadow_label

OUTPUT_SAMPLES = 64  # answers whose lengths estimate how long running ones will go on

_OUTCOMES = {
    FinishReason.STOP: Outcome.STOP,
    FinishReason.LENGTH: Outcome.LENGTH,
    FinishReason.ABORT: Outcome.ABORT,
    FinishReason.TIMEOUT: Outcome.TIMED_OUT,
    FinishReason.ERROR: Outcome.ERROR,
}


class LeaseState(Enum):
    QUEUED = "queued"
    RUNNING = "running"
    CLOSED = "closed"


@dataclass(slots=True, eq=False)
class Lease:
    request_id: RequestId
    deployment: str  # the name that serves it (the fallback's, after a fallback)
    version: str  # model@version
    engine_key: str  # the engine slot on the worker: model@version, `#long` for a pool
    replica: str  # the worker it was sent to
    priority: Priority
    num_prompt_tokens: int
    max_tokens: int
    clock: RequestClock  # the request's own; arrival_ts is its arrival at the gateway
    book: LoadBook
    num_cached_tokens: int = 0  # of its prompt, likely in the prefix cache there
    predicted_ttft_s: float | None = None  # admission's prediction, when it had one
    shadow: bool = False  # a mirrored copy (gateway/shadow.py)
    context: RequestContext | None = None  # the API request's log fields and trace
    state: LeaseState = LeaseState.QUEUED
    num_output_tokens: int = 0  # all choices together
    num_seqs: int = 1  # its choices (n)
    # Output tokens of each choice that has finished, for the book's answer lengths.
    choice_outputs: list[int] = field(default_factory=list)
    _choice_tokens: dict[int, int] = field(default_factory=dict)  # by choice, so far

    @property
    def num_running_seqs(self) -> int:
        return self.num_seqs - len(self.choice_outputs)

    def observe(self, event: EngineEvent) -> None:
        """One event of the request's stream, in order."""
        assert self.state is not LeaseState.CLOSED, f"{self.request_id}: event after close"
        if self.state is LeaseState.QUEUED:
            self.state = LeaseState.RUNNING
        if isinstance(event, TokenEvent):
            n = len(event.token_ids)
            label = shadow_label(self.deployment) if self.shadow else self.deployment
            self.book.recorder.output_tokens(
                label,
                self.version,
                n,
                event.token_ts,
                self.clock,
                self.shadow,
                # Only the first token's TTFT observation takes an exemplar.
                self._exemplar if self.clock.first_token_ts is None else None,
            )
            if self.clock.first_token_ts is None:
                self.clock.first_token_ts = event.token_ts
                self.book.first_token(self)
            self.clock.last_token_ts = event.token_ts
            self.num_output_tokens += n
            self._choice_tokens[event.index] = self._choice_tokens.get(event.index, 0) + n
            return
        self.choice_outputs.append(self._choice_tokens.get(event.index, 0))
        normal = event.reason in (FinishReason.STOP, FinishReason.LENGTH)
        if not normal or not self.num_running_seqs:
            self._close(_OUTCOMES[event.reason], event)

    def close(self) -> None:
        """The request's stream is done with. A lease whose finish event was not seen
        ends as aborted (its client left); closing again does nothing."""
        if self.state is not LeaseState.CLOSED:
            self._close(Outcome.ABORT, None)

    def discard(self) -> None:
        """The request leaves every count without an outcome of its own: it never reached
        a worker (refused, or the worker unreachable), or its service records its
        outcome (an embedding, which streams no events)."""
        assert self.state is LeaseState.QUEUED, f"{self.request_id}: discarded after start"
        self.state = LeaseState.CLOSED
        self.book.closed(self, None)

    def _close(self, outcome: Outcome, finish: FinishEvent | None) -> None:
        self.state = LeaseState.CLOSED
        self.clock.finished_ts = self.clock.finished_ts or time.monotonic()
        self.book.closed(self, outcome)
        # A client that left has no finish event: its prompt is the one sent, not none.
        num_prompt = finish.num_prompt_tokens if finish is not None else self.num_prompt_tokens
        record = RequestRecord(
            self.deployment,
            self.version,
            self.priority,
            outcome,
            num_prompt,
            self.num_output_tokens,
            self.clock,
            self.shadow,
        )
        self.book.recorder.ended(record, self._exemplar)
        if self.context is not None:
            self.context.ended(record, finish)

    @property
    def _exemplar(self) -> dict[str, str] | None:
        """The trace of a sampled request, for the latency histograms' exemplars."""
        trace = self.context.trace if self.context is not None else None
        return {"trace_id": trace.trace_id} if trace is not None and trace.sampled else None


@dataclass(slots=True)
class ReplicaCounts:
    num_in_flight: int = 0  # open leases sent there
    num_pending_prompt_tokens: int = 0  # prompt tokens of those with no event back yet


@dataclass(slots=True)
class _Engine:
    open: dict[RequestId, Lease] = field(default_factory=dict)  # in the order opened
    outputs: deque[int] = field(default_factory=lambda: deque(maxlen=OUTPUT_SAMPLES))


class LoadBook:
    """The open leases of every engine (by engine key, across the workers that run it)."""

    def __init__(self, recorder: RequestRecorder) -> None:
        self.recorder = recorder
        self._engines: dict[str, _Engine] = {}

    def open(
        self,
        request_id: RequestId,
        deployment: str,
        version: str,
        engine_key: str,
        replica: str,
        priority: Priority,
        num_prompt_tokens: int,
        max_tokens: int,
        clock: RequestClock,
        predicted_ttft_s: float | None = None,
        shadow: bool = False,
        context: RequestContext | None = None,
        num_cached_tokens: int = 0,
        num_seqs: int = 1,
    ) -> Lease:
        lease = Lease(
            request_id,
            deployment,
            version,
            engine_key,
            replica,
            priority,
            num_prompt_tokens,
            max_tokens,
            clock,
            self,
            num_cached_tokens,
            predicted_ttft_s,
            shadow,
            context,
            num_seqs=num_seqs,
        )
        engine = self._engines.setdefault(engine_key, _Engine())
        assert request_id not in engine.open, f"request id {request_id} is already open"
        engine.open[request_id] = lease
        return lease

    def first_token(self, lease: Lease) -> None:
        """How late the first token came against admission's forecast."""
        predicted, ttft = lease.predicted_ttft_s, lease.clock.ttft_s
        if predicted is not None and predicted > 0 and ttft is not None and not lease.shadow:
            self.recorder.ttft_forecast(lease.deployment, lease.version, ttft / predicted)

    def closed(self, lease: Lease, outcome: Outcome | None) -> None:
        engine = self._engines[lease.engine_key]
        del engine.open[lease.request_id]
        if outcome in (Outcome.STOP, Outcome.LENGTH):
            engine.outputs.extend(lease.choice_outputs)

    def expected_output(self, engine_key: str, max_tokens: int) -> int:
        """How many tokens a new request of this max_tokens is expected to produce there."""
        engine = self._engines.get(engine_key) or _Engine()
        return _TokensLeft(engine.outputs)(max_tokens, 0)

    def num_open(self) -> int:
        return sum(len(e.open) for e in self._engines.values())

    def queued(self, engine_key: str) -> dict[Priority, int]:
        """Per class, the engine's requests with no event back yet, on any replica (an
        embedding streams none: it is queued until it ends)."""
        queued = {p: 0 for p in Priority}
        engine = self._engines.get(engine_key)
        for lease in engine.open.values() if engine else ():
            if lease.state is LeaseState.QUEUED:
                queued[lease.priority] += 1
        return queued

    def replica_counts(self, engine_key: str) -> dict[str, ReplicaCounts]:
        counts: dict[str, ReplicaCounts] = {}
        engine = self._engines.get(engine_key)
        for lease in engine.open.values() if engine else ():
            c = counts.setdefault(lease.replica, ReplicaCounts())
            c.num_in_flight += 1
            if lease.state is LeaseState.QUEUED:
                c.num_pending_prompt_tokens += lease.num_prompt_tokens
        return counts

    def snapshot(
        self,
        engine_key: str,
        replica: str,
        limits: tuple[int, int],
        costs: StepCosts | None,
        now_ts: float | None = None,
    ) -> LoadSnapshot:
        """The engine's load as admission reads it: its queue across its workers, and
        the replica the request would go to as the forecast reads it (`limits`: that
        engine's max_num_seqs and max_num_batched_tokens; `costs`: its step costs).
        These are the gateway's own counts: heartbeat stats lag by up to a second, long
        enough to count a finished request and its successor both."""
        now = time.monotonic() if now_ts is None else now_ts
        queued = {p: 0 for p in Priority}
        oldest = {p: 0.0 for p in Priority}
        running: list[int] = []
        waiting: list[Waiting] = []
        engine = self._engines.get(engine_key) or _Engine()
        left = _TokensLeft(engine.outputs)
        for lease in engine.open.values():
            here = lease.replica == replica
            if lease.state is LeaseState.RUNNING:
                if here:
                    # Each choice still running, at the choices' mean length so far.
                    produced = lease.num_output_tokens // lease.num_seqs
                    running += [left(lease.max_tokens, produced)] * lease.num_running_seqs
                continue
            p = lease.priority
            queued[p] += 1
            oldest[p] = max(oldest[p], now - lease.clock.arrival_ts)
            if here:
                expected = left(lease.max_tokens, 0)
                prompt = lease.num_prompt_tokens
                waiting.append(Waiting(p, prompt, expected, lease.num_cached_tokens))
                # Its later choices find the prompt in the cache (engine/llm_engine.py).
                waiting += [Waiting(p, prompt, expected, prompt)] * (lease.num_seqs - 1)
        max_num_seqs, max_num_batched_tokens = limits
        return LoadSnapshot(
            queued=queued,
            oldest_queued_s=oldest,
            engine=EngineLoad(max_num_seqs, max_num_batched_tokens, tuple(running), tuple(waiting)),
            costs=costs,
        )


class _TokensLeft:
    """How many tokens a request will still produce (see the module's docstring)."""

    def __init__(self, outputs: Iterable[int]) -> None:
        self._outputs = sorted(outputs)
        self._memo: dict[tuple[int, int], int] = {}

    def __call__(self, max_tokens: int, produced: int) -> int:
        key = (max_tokens, produced)
        found = self._memo.get(key)
        if found is None:
            longer = [n for n in (min(o, max_tokens) for o in self._outputs) if n > produced]
            expected = sum(longer) / len(longer) if longer else max_tokens
            found = self._memo[key] = max(1, round(expected) - produced)
        return found
