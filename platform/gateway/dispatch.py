"""The last step of a generation: a lease opened on the chosen replica and the request
sent there. A replica that cannot be reached becomes a suspect (the link marks it) and
the router's next choice among the engine's other replicas gets the request."""

from __future__ import annotations

import time

from vigil.engine.request import GenerationRequest
from vigil.platform.errors import ServiceUnavailable
from vigil.platform.gateway.lease import Lease, LoadBook
from vigil.platform.gateway.link import Events, WorkerLink, WorkerUnreachable
from vigil.platform.gateway.placement import Placement, Placer
from vigil.platform.telemetry.context import RequestContext


class Dispatcher:
    def __init__(self, loads: LoadBook, link: WorkerLink, placer: Placer) -> None:
        self.loads = loads
        self.link = link
        self.placer = placer

    async def send(
        self,
        place: Placement,
        request: GenerationRequest,
        predicted_ttft_s: float | None,
        context: RequestContext | None,
        shadow: bool = False,
    ) -> tuple[Lease, Events]:
        """`context`: the API request's, whose trace each hop to a worker joins and
        whose log fields the lease fills when it closes (None for a mirrored copy)."""
        replica = place.replica
        trace = context.trace if context is not None else None
        while True:
            headers = trace.worker_headers(replica.id, time.monotonic()) if trace else None
            lease = self.loads.open(
                request.request_id,
                place.spec.name,
                place.version.key,
                place.key,
                replica.id,
                request.priority,
                len(request.prompt_ids),
                request.params.max_tokens,
                request.clock,
                predicted_ttft_s,
                shadow,
                context,
                place.num_cached_tokens,
                request.params.n,
            )
            self.placer.sent(place, replica)
            try:
                return lease, await self.link.open(replica, place.key, request, headers)
            except WorkerUnreachable:
                lease.discard()
            except BaseException:
                lease.discard()
                raise
            replicas = self.placer.workers.serving(place.key)
            if not replicas:
                raise ServiceUnavailable(
                    f"No live worker could take the request for '{place.key}'; retry shortly.",
                    code="worker_unavailable",
                    retry_after_s=1,
                )
            replica = self.placer.choose(place.key, replicas, request.prompt_ids)
