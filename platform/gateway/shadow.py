"""Shadow traffic: a copy of a share of a deployment's requests sent to its shadow
version, whose answers are discarded, so its SLIs can be compared with the stable
version's before any user sees it.

    request served by the deployment itself -> split.to_shadow (shadow_weight of 100)
      -> a task, after the original is on its way: placed on the shadow version (its
         own tokenizer and caps), dropped unless that engine has nobody queued and
         fewer than MAX_IN_FLIGHT mirrors of the deployment are running
      -> sent at batch priority; events read to the end and thrown away

A mirror never touches its client's request: it is not counted in the deployment's
admission, SLIs or metrics (its metrics carry the `<deployment>:shadow` label; its SLIs
count under its version only), and whatever goes wrong with it is counted, not raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextvars import Context
from dataclasses import replace
from enum import StrEnum

from vigil.engine.request import Priority, RequestId
from vigil.platform.control.specs import DeploymentSpec
from vigil.platform.errors import VigilError
from vigil.platform.gateway.params import GenerationParams
from vigil.platform.telemetry.metrics import Metrics
from vigil.platform.telemetry.recorder import shadow_label

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 4  # mirrors of one deployment running at once; more are dropped
PRIORITY = Priority.BATCH  # the lowest: a mirror yields to every client's request


class Dropped(StrEnum):
    BUSY = "busy"  # the shadow's engine has requests waiting, or enough mirrors running
    NOT_READY = "not_ready"  # no worker has the shadow version ready
    FAILED = "failed"  # refused on the shadow (its caps), or its worker failed


Run = Callable[[DeploymentSpec, GenerationParams], Awaitable[None]]


class ShadowMirror:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._tasks: dict[str, set[asyncio.Task[None]]] = {}  # deployment -> mirrors running

    def in_flight(self, deployment: str) -> int:
        return len(self._tasks.get(deployment, ()))

    def mirror(self, spec: DeploymentSpec, params: GenerationParams, run: Run) -> None:
        """Start `run` (the mirrored request, to its end) unless the deployment already
        has MAX_IN_FLIGHT mirrors running."""
        assert spec.shadow is not None
        if self.in_flight(spec.name) >= MAX_IN_FLIGHT:
            self.dropped(spec, Dropped.BUSY)
            return
        copy = replace(params, request_id=RequestId(f"{params.request_id}-shadow"))
        # A context of its own: the client's request's log fields and trace are not its.
        task = asyncio.create_task(
            self._run(spec, copy, run), name=f"shadow {copy.request_id}", context=Context()
        )
        tasks = self._tasks.setdefault(spec.name, set())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _run(self, spec: DeploymentSpec, params: GenerationParams, run: Run) -> None:
        try:
            await run(spec, params)
        except VigilError as exc:
            self.dropped(spec, Dropped.FAILED)
            log.info("shadow request %s of %s failed: %s", params.request_id, spec.name, exc)
        except Exception:
            self.dropped(spec, Dropped.FAILED)
            log.exception("shadow request %s of %s failed", params.request_id, spec.name)

    def dropped(self, spec: DeploymentSpec, why: Dropped) -> None:
        assert spec.shadow is not None
        self.metrics.shadow_dropped.labels(shadow_label(spec.name), spec.shadow.key, why).inc()

    async def close(self) -> None:
        tasks = [t for group in self._tasks.values() for t in group]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
