"""A started generation: where it went and what admission said (`Routed`, which the
API edge notes in the request's log fields and trace), and its events, each seen by its
lease, which is closed however the request ends."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from vigil.engine.request import (
    EngineEvent,
    FinishEvent,
    FinishReason,
    GenerationRequest,
    RequestId,
    TokenEvent,
)
from vigil.platform.errors import EngineFailed, QueueTimeout, RateLimited, VigilError
from vigil.platform.gateway.admission import Admission
from vigil.platform.gateway.lease import Lease
from vigil.platform.gateway.link import Events

# The events a started generation yields are the engine's own records; the API reads
# them from here, so that it depends on the gateway and not on the engine.
__all__ = [
    "Decided",
    "EngineEvent",
    "FinishEvent",
    "FinishReason",
    "Generation",
    "Route",
    "Routed",
    "Shed",
    "TokenEvent",
    "finish_error",
]


@dataclass(frozen=True, slots=True)
class Route:
    """How a request got to the deployment that serves it."""

    fallback_from: str | None = None  # the deployment asked for, after a fallback
    skipped: str | None = None  # a fallback that was called for and not taken, and why


@dataclass(frozen=True, slots=True)
class Decided:
    """One admission decision, on the deployment and version a request was placed on."""

    deployment: str
    version: str  # model/version key
    admission: Admission
    decided_ts: float


@dataclass(frozen=True, slots=True)
class Routed:
    """Where a request was sent and why: what the API edge notes about it."""

    deployment: str
    version: str  # model/version key
    replica: str
    ttft_target_s: float  # the SLO of the deployment that serves it
    route: Route
    decisions: tuple[Decided, ...]  # in order: two when it fell back


class Shed(RateLimited):
    """A request admission shed, with what was decided on the way."""

    def __init__(self, error: RateLimited, routed: Routed) -> None:
        assert error.retry_after_s is not None
        super().__init__(error.message, retry_after_s=error.retry_after_s, code=error.code)
        self.routed = routed


class Generation:
    """An admitted request: who serves it, and its events. Read `events()` once; leaving
    it early (the client went away) aborts the request. Its lease closes however it
    ends, even if the events are never read."""

    def __init__(
        self,
        lease: Lease,
        request: GenerationRequest,
        events: Events,
        served_by: str,
        routed: Routed,
    ) -> None:
        self.lease = lease
        self.request = request
        self.served_by = served_by  # model/version
        self.routed = routed
        self._events = events
        weakref.finalize(self, lease.close)

    @property
    def request_id(self) -> RequestId:
        return self.request.request_id

    @property
    def route(self) -> Route:
        return self.routed.route

    @property
    def deployment(self) -> str:
        return self.lease.deployment

    @property
    def replica(self) -> str:
        return self.lease.replica

    async def events(self) -> AsyncGenerator[EngineEvent, None]:
        try:
            async for event in self._events:
                self.lease.observe(event)
                yield event
        finally:
            await self._events.aclose()
            self.lease.close()

    async def collect(self) -> tuple[str, FinishEvent]:
        """The whole answer, or the error it ended with."""
        parts: list[str] = []
        # Closed on the way out, not whenever it is collected: until then its lease
        # would count the request as in flight, in admission's and routing's eyes.
        async with contextlib.aclosing(self.events()) as events:
            async for event in events:
                parts.append(event.text)
                if isinstance(event, FinishEvent):
                    error = finish_error(event)
                    if error is not None:
                        raise error
                    return "".join(parts), event
        raise AssertionError("the engine's event stream ended without a FinishEvent")


def finish_error(event: FinishEvent) -> VigilError | None:
    """The error a request that ended this way answers with; None for a normal end."""
    if event.reason in (FinishReason.STOP, FinishReason.LENGTH):
        return None
    if event.reason is FinishReason.TIMEOUT:
        clock = event.clock
        waited_s = (clock.finished_ts or clock.arrival_ts) - clock.arrival_ts
        return QueueTimeout(
            f"The request waited {waited_s:.1f} s in the queue without starting and was "
            "dropped; the server is overloaded, retry later.",
            code="queue_timeout",
            retry_after_s=1,
        )
    return EngineFailed(event.error or "the engine stopped the request", code="engine_error")
