"""The load offered to each deployment now, and the time to first token its own workers
would give under it: what the SLO loop switches a fallback back by.

Offered is every interactive request asked of the deployment over the last
OFFERED_WINDOW_S, whatever became of it (admitted, sent to the fallback, shed): the load
the deployment would have to serve itself once the fallback is off. While the fallback
takes the traffic, the deployment's own windows empty, so they prove nothing about
whether it could take it back; this does.

The forecast is the capacity planner's (planner.predict: a simulation of continuous
batching with the workers' measured step costs, the model admission forecasts with),
at the offered requests/s shared by the workers that serve the deployment, with the
prompt lengths offered and the answer lengths its engine has been giving (lease.py).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from vigil.platform.planning.load import SLOTarget, TargetLoad, empirical
from vigil.platform.planning.planner import predict
from vigil.platform.planning.rates import MeasuredRates

OFFERED_WINDOW_S = 30.0
MAX_OFFERED = 10_000  # requests kept per deployment (over that, the window is shorter)
FORECAST_REQUESTS = 300  # simulated per forecast: a few tens of milliseconds of CPU


@dataclass(frozen=True, slots=True)
class Offered:
    ts: float
    num_prompt_tokens: int
    num_output_tokens: int  # expected (lease.py's estimate, from the engine's answers)


class OfferedLoad:
    def __init__(self) -> None:
        self._by_deployment: dict[str, deque[Offered]] = {}

    def add(
        self,
        deployment: str,
        num_prompt_tokens: int,
        num_output_tokens: int,
        now_ts: float | None = None,
    ) -> None:
        now = time.monotonic() if now_ts is None else now_ts
        queue = self._by_deployment.setdefault(deployment, deque(maxlen=MAX_OFFERED))
        queue.append(Offered(now, num_prompt_tokens, num_output_tokens))

    def load(self, deployment: str, now_ts: float | None = None) -> TargetLoad | None:
        """Requests/s, prompt and answer lengths over the window; None when none came."""
        now = time.monotonic() if now_ts is None else now_ts
        queue = self._by_deployment.get(deployment)
        while queue and queue[0].ts < now - OFFERED_WINDOW_S:
            queue.popleft()
        if not queue:
            return None
        return TargetLoad(
            len(queue) / OFFERED_WINDOW_S,
            empirical([o.num_prompt_tokens for o in queue]),
            empirical([max(1, o.num_output_tokens) for o in queue]),
        )

    def forget(self, keep: set[str]) -> None:
        for name in set(self._by_deployment) - keep:
            del self._by_deployment[name]


def ttft_p99_at(
    rates: MeasuredRates, load: TargetLoad | None, num_workers: int, slo: SLOTarget
) -> float:
    """The TTFT p99 the deployment's workers would give under the offered load (0 when
    nothing is offered; infinite when it would queue without bound)."""
    if load is None or num_workers < 1:
        return 0.0
    share = TargetLoad(load.rps / num_workers, load.prompt, load.output)
    prediction, _ = predict(rates, share, slo, share.rps, FORECAST_REQUESTS, seed=0)
    return prediction.ttft_p99_s
