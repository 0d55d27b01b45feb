"""Turns one request's events and clocks into metrics and live series points."""

from __future__ import annotations

import time

from vigil.engine.request import EngineEvent, FinishEvent, FinishReason, TokenEvent
from vigil.platform.gateway.admission import Admission, Verdict
from vigil.platform.telemetry.live import LiveSeries
from vigil.platform.telemetry.metrics import Metrics

_OUTCOMES = {
    FinishReason.STOP: "finished",
    FinishReason.LENGTH: "length",
    FinishReason.ABORT: "aborted",
    FinishReason.TIMEOUT: "timed_out",
    FinishReason.ERROR: "failed",
}


class RequestRecorder:
    def __init__(self, metrics: Metrics, live: LiveSeries) -> None:
        self.metrics = metrics
        self.live = live

    def track(self, deployment: str, arrival_ts: float) -> RequestTracker:
        return RequestTracker(self, deployment, arrival_ts)

    def record_admission(self, deployment: str, admission: Admission) -> None:
        m = self.metrics
        m.admission.labels(deployment, admission.verdict.value, admission.reason.value).inc()
        if admission.verdict is Verdict.SHED:
            m.requests.labels(deployment, "shed").inc()

    def record_embedding(
        self, deployment: str, num_tokens: int, arrival_ts: float, ok: bool
    ) -> None:
        m = self.metrics
        m.prompt_tokens.labels(deployment).inc(num_tokens)
        m.e2e.labels(deployment).observe(time.monotonic() - arrival_ts)
        m.requests.labels(deployment, "finished" if ok else "failed").inc()
        self.live.add_request()


class RequestTracker:
    """Observes one generation request's events; `close()` records how it ended,
    as aborted if the stream was left before its FinishEvent."""

    def __init__(self, recorder: RequestRecorder, deployment: str, arrival_ts: float) -> None:
        self._r = recorder
        self._deployment = deployment
        self._arrival_ts = arrival_ts
        self._last_token_ts: float | None = None
        self._finished = False

    def observe(self, event: EngineEvent) -> None:
        m, d = self._r.metrics, self._deployment
        if isinstance(event, TokenEvent):
            n = len(event.token_ids)
            m.generation_tokens.labels(d).inc(n)
            self._r.live.add_tokens(n)
            if self._last_token_ts is None:
                ttft = event.token_ts - self._arrival_ts
                m.ttft.labels(d).observe(ttft)
                self._r.live.add_ttft(ttft, event.token_ts)
            else:
                m.itl.labels(d).observe(event.token_ts - self._last_token_ts)
            self._last_token_ts = event.token_ts
            return
        self._finish(event)

    def _finish(self, event: FinishEvent) -> None:
        m, d = self._r.metrics, self._deployment
        self._finished = True
        m.prompt_tokens.labels(d).inc(event.num_prompt_tokens)
        end_ts = event.clock.finished_ts or time.monotonic()
        m.e2e.labels(d).observe(end_ts - self._arrival_ts)
        if event.clock.queue_time_s is not None:
            m.queue_time.labels(d).observe(event.clock.queue_time_s)
        m.requests.labels(d, _OUTCOMES[event.reason]).inc()
        self._r.live.add_request()

    def close(self) -> None:
        if not self._finished:
            self._finished = True
            self._r.metrics.requests.labels(self._deployment, "aborted").inc()
            self._r.live.add_request()
