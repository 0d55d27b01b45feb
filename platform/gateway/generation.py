"""A started generation: where it went and what admission said (`Routed`, which the
API edge notes in the request's log fields and trace), and its events, each seen by its
lease, which is closed however the request ends.

A request of n choices yields the events of all of them, each with its choice's index,
and ends once every choice has finished, or at the first that failed (the others are
then aborted). What the API needs to write the answer comes with it: the version's
token bytes (for logprobs) and, when tools are offered, a parser of its tool calls."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from vigil.engine.request import (
    EngineEvent,
    FinishEvent,
    FinishReason,
    GenerationRequest,
    RequestId,
    SampledLogprobs,
    TokenEvent,
)
from vigil.engine.tokenizer import Tokenizer
from vigil.platform.errors import EngineFailed, QueueTimeout, RateLimited, VigilError
from vigil.platform.gateway.admission import Admission
from vigil.platform.gateway.grammars import GrammarCheck
from vigil.platform.gateway.lease import Lease
from vigil.platform.gateway.link import Events
from vigil.platform.gateway.tool_calls import ToolCallParser
from vigil.platform.gateway.tool_formats import ToolFormat

# The events a started generation yields are the engine's own records; the API reads
# them from here, so that it depends on the gateway and not on the engine.
__all__ = [
    "Choice",
    "Collected",
    "Decided",
    "EngineEvent",
    "FinishEvent",
    "FinishReason",
    "Generation",
    "Route",
    "Routed",
    "SampledLogprobs",
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
    grammar: GrammarCheck | None = None  # its output's grammar, compiled on admission


class Shed(RateLimited):
    """A request admission shed, with what was decided on the way."""

    def __init__(self, error: RateLimited, routed: Routed) -> None:
        assert error.retry_after_s is not None
        super().__init__(error.message, retry_after_s=error.retry_after_s, code=error.code)
        self.routed = routed


@dataclass(slots=True)
class Choice:
    """One choice's whole answer."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[SampledLogprobs] = field(default_factory=list)  # when asked for
    finish: FinishEvent | None = None


@dataclass(slots=True)
class Collected:
    choices: list[Choice]  # by index
    prompt_logprobs: tuple[SampledLogprobs, ...]  # when asked for

    @property
    def num_prompt_tokens(self) -> int:
        """Once for the request, however many choices shared it."""
        finish = self.choices[0].finish
        assert finish is not None
        return finish.num_prompt_tokens

    @property
    def num_output_tokens(self) -> int:
        return sum(c.finish.num_output_tokens for c in self.choices if c.finish is not None)


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
        tokenizer: Tokenizer,
        tool_format: ToolFormat | None = None,
    ) -> None:
        self.lease = lease
        self.request = request
        self.served_by = served_by  # model/version
        self.routed = routed
        self.tokenizer = tokenizer  # the version's
        self.tool_format = tool_format  # None: no tools offered, nothing to parse
        self._events = events
        weakref.finalize(self, lease.close)

    @property
    def num_choices(self) -> int:
        return self.request.params.n

    def tool_parser(self) -> ToolCallParser | None:
        """A new parser of one choice's tool calls; None when no tools were offered."""
        return None if self.tool_format is None else self.tool_format.parser()

    def token_bytes(self, token_id: int) -> bytes:
        return self.tokenizer.token_bytes(token_id)

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
        """Every choice's events, to the last choice's finish or the first failed one."""
        unfinished = self.num_choices
        try:
            async for event in self._events:
                self.lease.observe(event)
                yield event
                if isinstance(event, FinishEvent):
                    unfinished -= 1
                    if not unfinished or finish_error(event) is not None:
                        return
        finally:
            await self._events.aclose()
            self.lease.close()

    async def collect(self) -> Collected:
        """Every choice's whole answer, or the error the request ended with."""
        choices = [Choice(i) for i in range(self.num_choices)]
        prompt_logprobs: tuple[SampledLogprobs, ...] = ()
        # Closed on the way out, not whenever it is collected: until then its lease
        # would count the request as in flight, in admission's and routing's eyes.
        async with contextlib.aclosing(self.events()) as events:
            async for event in events:
                choice = choices[event.index]
                choice.text += event.text
                if isinstance(event, TokenEvent):
                    choice.token_ids.extend(event.token_ids)
                    choice.logprobs.extend(event.logprobs)
                    prompt_logprobs = prompt_logprobs or event.prompt_logprobs
                    continue
                error = finish_error(event)
                if error is not None:
                    raise error
                choice.finish = event
        if any(c.finish is None for c in choices):
            raise AssertionError("the engine's event stream ended before every choice finished")
        return Collected(choices, prompt_logprobs)


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
