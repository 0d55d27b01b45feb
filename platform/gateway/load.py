"""Live load of one engine (across the workers that run it) as the gateway sees it:
what is queued and how fast it drains.

Queued counts come from the gateway's own bookkeeping (admitted, no event back yet),
so they include requests still on their way to a worker; the rate at which queued
requests start is measured here. Prefill and decode rates are measured by the workers
and passed in with each snapshot.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from vigil.engine.request import Priority, RequestId
from vigil.platform.gateway.admission import LoadSnapshot

START_WINDOW_S = 10.0


@dataclass(slots=True)
class _Queued:
    priority: Priority
    prompt_tokens: int
    arrival_ts: float


class LoadTracker:
    def __init__(self) -> None:
        self._queued: dict[RequestId, _Queued] = {}
        self._starts: deque[float] = deque(maxlen=4096)

    def enqueue(
        self, rid: RequestId, priority: Priority, prompt_tokens: int, now_ts: float
    ) -> None:
        self._queued[rid] = _Queued(priority, prompt_tokens, now_ts)

    def started(self, rid: RequestId, now_ts: float) -> None:
        """The request's first event came back (a token, or its end): it left the queue."""
        if self._queued.pop(rid, None) is not None:
            self._starts.append(now_ts)

    def snapshot(
        self,
        now_ts: float | None = None,
        num_running: int = 0,
        max_num_seqs: int = 1 << 30,
        prefill_tokens_per_s: float | None = None,
        decode_step_s: float | None = None,
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
            prefill_tokens_per_s=prefill_tokens_per_s,
            decode_step_s=decode_step_s,
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
