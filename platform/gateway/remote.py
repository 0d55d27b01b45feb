"""An engine on a worker, as the gateway calls it: same events as the engine's own
`generate`, timed by the gateway's clock.

A worker that fails mid-request (connection refused or cut, a crash) ends the request
with an ERROR finish event, so the client gets a clean error (an error event at the
end of its stream), and the worker is marked a suspect so that new requests go to
another one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import msgspec

from vigil.engine.llm_engine import RequestRejected
from vigil.engine.request import (
    EngineEvent,
    FinishEvent,
    FinishReason,
    GenerationRequest,
    RequestClock,
    TokenEvent,
)
from vigil.platform.errors import InvalidRequest, ServiceUnavailable, VigilError
from vigil.platform.worker.protocol import (
    EmbedCall,
    EmbedResult,
    FinishWire,
    GenerateCall,
    TokenWire,
    params_wire,
)

_EVENTS = msgspec.json.Decoder(TokenWire | FinishWire)


@dataclass(frozen=True, slots=True)
class EngineLimits:
    max_model_len: int
    kv_capacity_tokens: int
    max_num_seqs: int

    @property
    def context(self) -> int:
        """The most prompt + output tokens one request may have."""
        return min(self.max_model_len, self.kv_capacity_tokens)


class RemoteEngine:
    def __init__(
        self,
        client: httpx.AsyncClient,
        replica: str,
        address: str,
        slot: str,
        limits: EngineLimits,
        token: str,
        on_failure: Callable[[str], None],
    ) -> None:
        self.replica = replica
        self.slot = slot
        self.limits = limits
        self._client = client
        self._url = f"{address}/internal/generate"
        self._headers = {"Authorization": f"Bearer {token}"}
        self._on_failure = on_failure

    def check_request(self, request: GenerationRequest) -> None:
        """The engine's own rule (LLMEngine.check_request), from the limits it reported."""
        num_prompt = len(request.prompt_ids)
        if num_prompt == 0:
            raise RequestRejected("the prompt is empty")
        total = num_prompt + request.params.max_tokens
        if total > self.limits.context:
            raise RequestRejected(
                f"prompt ({num_prompt} tokens) plus max_tokens ({request.params.max_tokens}) "
                f"exceeds the context window of {self.limits.context} tokens"
            )

    async def generate(self, request: GenerationRequest) -> AsyncIterator[EngineEvent]:
        deadline = request.deadline_ts
        call = GenerateCall(
            slot=self.slot,
            request_id=request.request_id,
            prompt_ids=request.prompt_ids,
            params=params_wire(request.params),
            priority=int(request.priority),
            max_queue_wait_s=None if deadline is None else max(0.0, deadline - time.monotonic()),
        )
        clock = RequestClock(request.clock.arrival_ts)
        try:
            async with self._client.stream(
                "POST",
                self._url,
                content=msgspec.json.encode(call),
                headers=self._headers,
                timeout=None,
            ) as response:
                if response.status_code != 200:
                    raise _worker_error(response.status_code, await response.aread())
                async for line in response.aiter_lines():
                    if not line:
                        continue
                    event = _EVENTS.decode(line)
                    now = time.monotonic()
                    if isinstance(event, TokenWire):
                        clock.first_token_ts = clock.first_token_ts or now
                        clock.last_token_ts = now
                        yield TokenEvent(event.text, tuple(event.ids), now)
                    else:
                        yield _finish(event, clock, now)
                        return
        except httpx.HTTPError as exc:
            self._on_failure(self.replica)
            now = time.monotonic()
            clock.finished_ts = now
            yield FinishEvent(
                FinishReason.ERROR,
                "",
                len(request.prompt_ids),
                0,
                clock,
                f"worker {self.replica} failed: {type(exc).__name__}",
            )
            return
        # The stream ended without a finish event: the worker went away mid-answer.
        self._on_failure(self.replica)
        clock.finished_ts = time.monotonic()
        yield FinishEvent(
            FinishReason.ERROR,
            "",
            len(request.prompt_ids),
            0,
            clock,
            f"worker {self.replica} stopped in the middle of the answer",
        )


def _finish(event: FinishWire, clock: RequestClock, now: float) -> FinishEvent:
    if event.queue_s is not None:
        clock.scheduled_ts = clock.arrival_ts + event.queue_s
    clock.finished_ts = now
    return FinishEvent(
        FinishReason(event.reason),
        event.text,
        event.num_prompt_tokens,
        event.num_output_tokens,
        clock,
        event.error,
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


class RemoteEmbedder:
    def __init__(
        self,
        client: httpx.AsyncClient,
        replica: str,
        address: str,
        slot: str,
        token: str,
        on_failure: Callable[[str], None],
    ) -> None:
        self.replica = replica
        self._client = client
        self._url = f"{address}/internal/embed"
        self._slot = slot
        self._headers = {"Authorization": f"Bearer {token}"}
        self._on_failure = on_failure

    async def embed(self, texts: list[str]) -> EmbedResult:
        try:
            response = await self._client.post(
                self._url,
                content=msgspec.json.encode(EmbedCall(self._slot, texts)),
                headers=self._headers,
                timeout=60,
            )
        except httpx.HTTPError as exc:
            self._on_failure(self.replica)
            raise ServiceUnavailable(
                f"worker {self.replica} failed: {type(exc).__name__}",
                code="worker_failed",
                retry_after_s=1,
            ) from exc
        if response.status_code != 200:
            raise _worker_error(response.status_code, response.content)
        return msgspec.json.decode(response.content, type=EmbedResult)
