"""Turns what happened to requests into metrics and live series points.

It reads plain records (an admission verdict's names, a count of tokens with their
timing, a finished request's record with its own clock), never the gateway's objects:
the gateway's request lease calls it as the request moves, exactly once per event.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from vigil.engine.request import Priority, RequestClock
from vigil.platform.telemetry.deployments import DeploymentSeries
from vigil.platform.telemetry.live import LiveSeries
from vigil.platform.telemetry.metrics import Metrics


class Outcome(StrEnum):
    """How a request ended: the `outcome` label of vigil_requests_total, with vLLM's
    finish reasons where they mean the same."""

    STOP = "stop"  # a stop token or string
    LENGTH = "length"  # max_tokens or the context window
    ABORT = "abort"  # the client left before the end
    SHED = "shed"  # refused at admission (429)
    TIMED_OUT = "timed_out"  # never started within its queue wait
    ERROR = "error"  # the engine or its worker failed


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One generation request that has ended, as telemetry and the SLOs read it."""

    deployment: str
    version: str  # model@version
    priority: Priority
    outcome: Outcome
    num_prompt_tokens: int  # as the engine counted them; as sent, if it never reported
    num_output_tokens: int
    clock: RequestClock  # arrival_ts at the gateway; finished_ts set
    shadow: bool = False  # a mirrored copy whose answer was discarded (gateway/shadow.py)

    @property
    def label(self) -> str:
        """The deployment label of its metrics: a shadow's are kept apart."""
        return shadow_label(self.deployment) if self.shadow else self.deployment


SHADOW_SUFFIX = ":shadow"


def shadow_label(deployment: str) -> str:
    """The `deployment` label of a deployment's shadow traffic, so no sum over the
    deployment's own series counts requests no client saw."""
    return f"{deployment}{SHADOW_SUFFIX}"


def unshadowed(label: str) -> str:
    """The deployment a shadow_label names."""
    return label.removesuffix(SHADOW_SUFFIX)


class RecordSink(Protocol):
    """What else reads every request's record: the SLO tracker (slo/tracker.py)."""

    def record(self, record: RequestRecord) -> None: ...

    def admission(
        self, deployment: str, version: str, admitted: bool, priority: Priority
    ) -> None: ...


class RequestRecorder:
    def __init__(
        self,
        metrics: Metrics,
        live: LiveSeries,
        sink: RecordSink | None = None,
        series: DeploymentSeries | None = None,
    ) -> None:
        self.metrics = metrics
        self.live = live
        self.sink = sink
        self._known: set[tuple[str, str]] = set()
        self.series = series or DeploymentSeries()  # the console's charts per deployment

    def admission(
        self, deployment: str, version: str, decision: str, reason: str, priority: Priority
    ) -> None:
        """An admission verdict: admitted, shed, or fallback (then a second verdict on
        the fallback deployment follows). For the SLIs, a request sent to the fallback
        was admitted by the deployment it asked for: it was served."""
        m = self.metrics
        if (deployment, version) not in self._known:
            # Every outcome of a version it routes to exists from its first request, at 0:
            # a rate of shed or failed requests is then 0, not absent, and the first one
            # shows in rate() (a series that appears at 1 does not).
            self._known.add((deployment, version))
            for outcome in Outcome:
                m.requests.labels(deployment, version, outcome.value)
        m.admission.labels(deployment, version, decision, reason).inc()
        if decision == "shed":
            m.requests.labels(deployment, version, Outcome.SHED.value).inc()
            self.series.add_end(deployment, Outcome.SHED.value)
            self.series.add_shed(deployment, reason)
        elif decision == "fallback":
            self.series.add_fallback(deployment)
        if self.sink is not None:
            self.sink.admission(deployment, version, decision != "shed", priority)

    def ttft_forecast(self, deployment: str, version: str, ratio: float) -> None:
        """A first token's time over admission's forecast of it."""
        self.metrics.ttft_forecast.labels(deployment, version).observe(ratio)
        self.series.add_forecast(deployment, ratio)

    def output_tokens(
        self,
        deployment: str,
        version: str,
        num_tokens: int,
        token_ts: float,
        clock: RequestClock,
        shadow: bool = False,
        exemplar: dict[str, str] | None = None,
    ) -> None:
        """Tokens that just arrived at `token_ts`; `clock` is the request's, before this
        arrival is written to it (so its last token is the previous one). `deployment`:
        the metrics label (shadow_label's for a shadow, which the live series skip)."""
        m = self.metrics
        m.generation_tokens.labels(deployment, version).inc(num_tokens)
        # The console's series count a shadow's under its version only.
        name = unshadowed(deployment) if shadow else deployment
        if not shadow:
            self.live.add_tokens(num_tokens)
        self.series.add_tokens(name, num_tokens, version, shadow)
        if clock.last_token_ts is None:
            ttft_s = token_ts - clock.arrival_ts
            m.ttft.labels(deployment, version).observe(ttft_s, exemplar)
            if not shadow:
                self.live.add_ttft(ttft_s, token_ts)
            self.series.add_ttft(name, ttft_s, token_ts, version, shadow)
        else:
            m.itl.labels(deployment, version).observe(token_ts - clock.last_token_ts)

    def ended(self, record: RequestRecord, exemplar: dict[str, str] | None = None) -> None:
        m, clock = self.metrics, record.clock
        d = (record.label, record.version)
        m.requests.labels(*d, record.outcome.value).inc()
        if not record.shadow:
            self.live.add_request()
        self.series.add_end(record.deployment, record.outcome.value, record.version, record.shadow)
        if self.sink is not None:
            self.sink.record(record)
        if record.outcome is Outcome.ABORT:
            # Left before the engine's last word: no latency figures; its prompt counts
            # as processed once a first token showed it was.
            if clock.first_token_ts is not None:
                m.prompt_tokens.labels(*d).inc(record.num_prompt_tokens)
            return
        m.prompt_tokens.labels(*d).inc(record.num_prompt_tokens)
        if clock.finished_ts is not None:
            m.e2e.labels(*d).observe(clock.finished_ts - clock.arrival_ts, exemplar)
        if clock.queue_time_s is not None:
            m.queue_time.labels(*d).observe(clock.queue_time_s)

    def embedding(
        self,
        deployment: str,
        version: str,
        priority: Priority,
        num_tokens: int,
        arrival_ts: float,
        ok: bool,
    ) -> None:
        """An embedding request that has ended: its whole answer is its first token, so
        its latency counts toward the TTFT SLI (and its failure toward availability)."""
        now = time.monotonic()
        m = self.metrics
        m.prompt_tokens.labels(deployment, version).inc(num_tokens)
        m.e2e.labels(deployment, version).observe(now - arrival_ts)
        outcome = Outcome.STOP if ok else Outcome.ERROR
        m.requests.labels(deployment, version, outcome.value).inc()
        self.live.add_request()
        self.series.add_end(deployment, outcome.value, version)
        if self.sink is not None:
            answered = now if ok else None
            clock = RequestClock(arrival_ts, first_token_ts=answered, finished_ts=now)
            self.sink.record(
                RequestRecord(deployment, version, priority, outcome, num_tokens, 0, clock)
            )
