"""How the gateway reaches the engines on its workers: the one seam between them.

`WorkerLink` has two implementations: `HttpWorkerLink`, which calls a worker process
over HTTP (wire/worker.py), and an in-process fake in the tests. Its contract:
- `open` returns once the worker has taken the request, with an iterator of the
  request's engine events that ends with a FinishEvent for each of its n choices (or
  with one ERROR finish, when the worker fails mid-request). A worker that cannot
  be reached raises WorkerUnreachable (the gateway may send the request elsewhere); one
  that refuses the request raises the matching VigilError. Either way the request never
  started, and the worker that failed is reported to `on_failure`.
- After that, a worker that fails mid-request (the connection cut, a crash) does not
  raise: the request ends with an ERROR finish, so the client gets a clean error at the
  end of its stream. Closing the iterator early aborts the request on the worker.
- A lost host or a cut link sends no reset, so silence is the sign: a worker that says
  nothing on a request for STREAM_IDLE_S (it writes a blank line every KEEPALIVE_S while
  the request waits) has failed, as has one whose heartbeats stop (workers.py).
- TokenEvents carry the gateway's clock (when the token reached the gateway); the
  finish writes the worker's queue time into the request's own clock.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Protocol

import httpx
import msgspec

from vigil.engine.request import (
    EngineEvent,
    FinishEvent,
    FinishReason,
    GenerationRequest,
    StepTimes,
    TokenEvent,
)
from vigil.platform.errors import InvalidRequest, ServiceUnavailable, VigilError
from vigil.platform.gateway.workers import HEARTBEAT_TIMEOUT_S, Replica
from vigil.platform.wire.worker import (
    EmbedCall,
    EmbedResult,
    FinishWire,
    GenerateCall,
    SamplingWire,
    TokenWire,
)

_EVENTS = msgspec.json.Decoder(TokenWire | FinishWire)
# A worker host that does not answer at all: a request sent to one that just dropped off
# goes elsewhere no later than the heartbeats would have it.
CONNECT_TIMEOUT_S = HEARTBEAT_TIMEOUT_S
# The most a worker may say nothing on a request (answer headers, events, keep-alives):
# a few of its keep-alives (worker/keepalive.py, KEEPALIVE_S) may be late, not all. A bit
# more than the heartbeats get: a stream cut by mistake is a client's error, a worker
# given up by mistake only moves new requests for a second.
STREAM_IDLE_S = 3.0
EMBED_TIMEOUT_S = 60.0
Events = AsyncGenerator[EngineEvent, None]


class WorkerUnreachable(Exception):
    """The worker could not be reached; the request did not start there."""


class WorkerLink(Protocol):
    async def open(
        self,
        replica: Replica,
        slot: str,
        request: GenerationRequest,
        trace_headers: Mapping[str, str] | None = None,
    ) -> Events:
        """`trace_headers`: the W3C traceparent the worker's span joins, when traced."""
        ...

    async def embed(self, replica: Replica, slot: str, token_ids: list[list[int]]) -> EmbedResult:
        """`token_ids`: per text, by the version's own tokenizer (the worker embeds them
        as they are)."""
        ...


class HttpWorkerLink:
    def __init__(
        self,
        client: httpx.AsyncClient,
        token: str,
        on_failure: Callable[[str], None],
        stream_idle_s: float = STREAM_IDLE_S,
    ) -> None:
        self._client = client
        self._headers = {"Authorization": f"Bearer {token}"}
        self._on_failure = on_failure
        self._stream_timeout = httpx.Timeout(
            None, connect=min(CONNECT_TIMEOUT_S, stream_idle_s), read=stream_idle_s
        )

    async def open(
        self,
        replica: Replica,
        slot: str,
        request: GenerationRequest,
        trace_headers: Mapping[str, str] | None = None,
    ) -> Events:
        deadline = request.deadline_ts
        call = GenerateCall(
            slot=slot,
            request_id=request.request_id,
            prompt_ids=request.prompt_ids,
            params=SamplingWire.of(request.params),
            priority=int(request.priority),
            max_queue_wait_s=None if deadline is None else max(0.0, deadline - time.monotonic()),
        )
        sent = self._client.build_request(
            "POST",
            f"{replica.address}/internal/generate",
            content=msgspec.json.encode(call),
            headers={**self._headers, **(trace_headers or {})},
            timeout=self._stream_timeout,
        )
        try:
            response = await self._client.send(sent, stream=True)
        except httpx.HTTPError as exc:
            self._on_failure(replica.id)
            raise WorkerUnreachable(f"worker {replica.id}: {type(exc).__name__}") from exc
        if response.status_code != 200:
            body = await response.aread()
            await response.aclose()
            raise _worker_error(response.status_code, body)
        return self._events(replica, request, response)

    async def _events(
        self, replica: Replica, request: GenerationRequest, response: httpx.Response
    ) -> Events:
        unfinished = request.params.n  # a FinishEvent ends each choice
        try:
            async for line in response.aiter_lines():
                if not line:
                    continue
                event = _EVENTS.decode(line)
                if isinstance(event, TokenWire):
                    yield TokenEvent(
                        event.text,
                        tuple(event.ids),
                        time.monotonic(),
                        tuple(lp.record() for lp in event.logprobs),
                        event.index,
                        tuple(lp.record() for lp in event.prompt_logprobs),
                    )
                    continue
                yield _finish(event, request)
                unfinished -= 1
                if not unfinished:
                    return
        except httpx.HTTPError as exc:
            yield self._failed(replica, request, f"failed: {type(exc).__name__}")
            return
        finally:
            await response.aclose()
        yield self._failed(replica, request, "stopped in the middle of the answer")

    def _failed(self, replica: Replica, request: GenerationRequest, what: str) -> FinishEvent:
        self._on_failure(replica.id)
        message = f"worker {replica.id} {what}"
        return FinishEvent(
            FinishReason.ERROR, "", len(request.prompt_ids), 0, request.clock, message
        )

    async def embed(self, replica: Replica, slot: str, token_ids: list[list[int]]) -> EmbedResult:
        try:
            response = await self._client.post(
                f"{replica.address}/internal/embed",
                content=msgspec.json.encode(EmbedCall(slot, token_ids)),
                headers=self._headers,
                timeout=httpx.Timeout(EMBED_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            )
        except httpx.HTTPError as exc:
            self._on_failure(replica.id)
            raise WorkerUnreachable(f"worker {replica.id}: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise _worker_error(response.status_code, response.content)
        return msgspec.json.decode(response.content, type=EmbedResult)


def _finish(event: FinishWire, request: GenerationRequest) -> FinishEvent:
    clock = request.clock
    if event.queue_s is not None:
        clock.scheduled_ts = clock.arrival_ts + event.queue_s
    return FinishEvent(
        FinishReason(event.reason),
        event.text,
        event.num_prompt_tokens,
        event.num_output_tokens,
        clock,
        event.error,
        event.cached_prompt_tokens,
        event.prefill_chunks,
        event.index,
        None if event.step_times_s is None else StepTimes(*event.step_times_s),
    )


def _worker_error(status: int, body: bytes) -> VigilError:
    """A worker's error answer, passed on as the same kind of error."""
    try:
        error = msgspec.json.decode(body)["error"]
        message, param, code = error["message"], error.get("param"), error.get("code")
    except (msgspec.DecodeError, KeyError, TypeError):
        message, param, code = body.decode(errors="replace")[:500], None, None
    if 400 <= status < 500:
        return InvalidRequest(message, param=param, code=code)
    return ServiceUnavailable(f"worker error: {message}", code=code or "worker_error")
