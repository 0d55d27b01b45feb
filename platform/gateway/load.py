"""Live load of one engine as the gateway sees it: what is queued, how fast it drains.

Queued counts come from the gateway's own bookkeeping (admitted, no event back yet),
so they include requests still on their way into the engine; rates come from the
engine's step stats, measured, never configured.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from vigil.engine.request import Priority, RequestId
from vigil.engine.stats import StepStats
from vigil.platform.gateway.admission import LoadSnapshot

EWMA_ALPHA = 0.2
START_WINDOW_S = 10.0
# A decode step time older than this says nothing about streams running now (an idle
# engine must not keep shedding on the memory of a busy minute).
DECODE_STALE_S = 2.0


class Ewma:
    def __init__(self, alpha: float = EWMA_ALPHA) -> None:
        self.alpha = alpha
        self.value: float | None = None

    def add(self, sample: float) -> None:
        v = self.value
        self.value = sample if v is None else v + self.alpha * (sample - v)


@dataclass(slots=True)
class _Queued:
    priority: Priority
    prompt_tokens: int
    arrival_ts: float


class LoadTracker:
    def __init__(self) -> None:
        self._queued: dict[RequestId, _Queued] = {}
        self._starts: deque[float] = deque(maxlen=4096)
        self.prefill_tokens_per_s = Ewma()
        self.decode_step_s = Ewma()
        self._last_decode_ts = float("-inf")

    def enqueue(
        self, rid: RequestId, priority: Priority, prompt_tokens: int, now_ts: float
    ) -> None:
        self._queued[rid] = _Queued(priority, prompt_tokens, now_ts)

    def started(self, rid: RequestId, now_ts: float) -> None:
        """The request's first event came back (a token, or its end): it left the queue."""
        if self._queued.pop(rid, None) is not None:
            self._starts.append(now_ts)

    def observe_step(self, step: StepStats, now_ts: float | None = None) -> None:
        """From the engine thread, after every step (floats assigned whole: no lock)."""
        prefill_tokens = step.num_tokens - step.num_decodes
        if prefill_tokens > 0 and step.total_s > 0:
            self.prefill_tokens_per_s.add(prefill_tokens / step.total_s)
        elif step.num_decodes > 0:
            self.decode_step_s.add(step.total_s)
            self._last_decode_ts = time.monotonic() if now_ts is None else now_ts

    def snapshot(
        self, now_ts: float | None = None, num_running: int = 0, max_num_seqs: int = 1 << 30
    ) -> LoadSnapshot:
        now = time.monotonic() if now_ts is None else now_ts
        queued = {p: 0 for p in Priority}
        tokens = {p: 0 for p in Priority}
        oldest = {p: 0.0 for p in Priority}
        for item in self._queued.values():
            queued[item.priority] += 1
            tokens[item.priority] += item.prompt_tokens
            oldest[item.priority] = max(oldest[item.priority], now - item.arrival_ts)
        return LoadSnapshot(
            queued=queued,
            queued_prompt_tokens=tokens,
            oldest_queued_s=oldest,
            prefill_tokens_per_s=self.prefill_tokens_per_s.value,
            decode_step_s=(
                self.decode_step_s.value if now - self._last_decode_ts < DECODE_STALE_S else None
            ),
            starts_per_s=self._starts_per_s(now),
            num_running=num_running,
            max_num_seqs=max_num_seqs,
        )

    def _starts_per_s(self, now: float) -> float | None:
        while self._starts and self._starts[0] < now - START_WINDOW_S:
            self._starts.popleft()
        if not self._starts:
            return None
        return len(self._starts) / START_WINDOW_S
