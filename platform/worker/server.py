"""`vigil worker`: one process running engines, serving the gateway over HTTP.

It registers with each of its gateways, then heart-beats every second: its slots'
states, limits, stats and measured rates go up; the assignment (which engines to run)
comes back and the runtime reconciles to it (worker/gateways.py). Generation answers
with one JSON line per event; when the gateway closes the stream (its client left), the
request is aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import uvicorn
from litestar import Litestar, Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import JSONBody
from litestar.response import Stream
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from vigil.engine.limits import RequestRejected
from vigil.engine.request import (
    FinishEvent,
    GenerationRequest,
    Priority,
    RequestClock,
    RequestId,
    TokenEvent,
)
from vigil.platform.errors import InvalidRequest, ServiceUnavailable
from vigil.platform.lifecycle import DrainingServer
from vigil.platform.settings import WorkerSettings
from vigil.platform.telemetry.context import configure_logging
from vigil.platform.telemetry.metrics import EngineMetrics
from vigil.platform.telemetry.tracing import WorkerSpans
from vigil.platform.wire.errors import EXCEPTION_HANDLERS
from vigil.platform.wire.worker import (
    EmbedCall,
    EmbedResult,
    FinishWire,
    GenerateCall,
    LogprobWire,
    TokenWire,
    require_worker_token,
)
from vigil.platform.worker.gateways import GatewayLinks
from vigil.platform.worker.keepalive import KEEPALIVE_S, with_keepalive
from vigil.platform.worker.runtime import (
    WorkerRuntime,
    configure_torch,
)

log = logging.getLogger(__name__)

DRAIN_POLL_S = 0.1
PARENT_CHECK_S = 1.0


async def _generate(
    data: GenerateCall, runtime: WorkerRuntime, spans: WorkerSpans | None, traceparent: str | None
) -> Stream:
    slot = runtime.ready_slot(data.slot)
    if slot is None or slot.engine is None:
        raise ServiceUnavailable(
            f"engine {data.slot} is not ready on this worker", code="engine_not_ready"
        )
    engine = slot.engine
    now = time.monotonic()
    wait = data.max_queue_wait_s
    request = GenerationRequest(
        RequestId(data.request_id),
        data.prompt_ids,
        data.params.params(),
        Priority(data.priority),
        RequestClock(now),
        None if wait is None else now + wait,
    )
    # Fitted to this engine's context by the gateway (gateway/prompt.py), from the limits
    # this worker reports; the engine's own check ends a request that does not fit
    # (an engine restarted smaller since) with an error event.
    if request.params.constraint is not None:
        # Compiled here, off the engine's thread (whose every step would wait for it) and
        # before the answer starts: the engine then finds it in its grammar cache.
        try:
            await asyncio.to_thread(engine.check_request, request)
        except RequestRejected as exc:
            raise InvalidRequest(str(exc), param=exc.param) from exc
    slot.in_flight += 1

    async def lines() -> AsyncIterator[bytes]:
        finish: FinishEvent | None = None
        try:
            async for event in engine.generate(request):
                if isinstance(event, TokenEvent):
                    wire: TokenWire | FinishWire = TokenWire(
                        event.text,
                        list(event.token_ids),
                        event.index,
                        [LogprobWire.of(lp) for lp in event.logprobs],
                        [LogprobWire.of(lp) for lp in event.prompt_logprobs],
                    )
                else:
                    finish = event
                    wire = _finish_wire(event)
                yield msgspec.json.encode(wire) + b"\n"
        finally:
            slot.in_flight -= 1
            if spans is not None and traceparent:
                spans.generated(traceparent, data.slot, request, finish)

    # Blank lines while the request waits or prefills: a silent stream means a lost worker.
    return Stream(with_keepalive(lines(), KEEPALIVE_S), media_type="application/x-ndjson")


def _finish_wire(event: FinishEvent) -> FinishWire:
    t = event.step_times
    return FinishWire(
        event.reason.value,
        event.text,
        event.num_prompt_tokens,
        event.num_output_tokens,
        event.clock.queue_time_s,
        event.error,
        event.num_cached_prompt_tokens,
        event.num_prefill_chunks,
        event.index,
        None
        if t is None
        else (t.prefill_own_s, t.prefill_shared_s, t.decode_own_s, t.decode_shared_s),
    )


async def _embed(data: EmbedCall, runtime: WorkerRuntime) -> EmbedResult:
    slot = runtime.ready_slot(data.slot)
    if slot is None or slot.embedder is None:
        raise ServiceUnavailable(
            f"embedder {data.slot} is not ready on this worker", code="engine_not_ready"
        )
    # Tokenized by the gateway with this model's tokenizer, within its window: the
    # embedder checks only that the ids fit the model it loaded.
    slot.in_flight += 1
    try:
        vectors = await slot.embedder.embed_ids(data.token_ids)
    except RequestRejected as exc:
        raise InvalidRequest(str(exc), param=exc.param, code="context_length_exceeded") from exc
    finally:
        slot.in_flight -= 1
    return EmbedResult(vectors)


def build_worker_app(
    runtime: WorkerRuntime,
    token: str,
    registry: CollectorRegistry,
    spans: WorkerSpans | None = None,
) -> Litestar:
    """`spans`: when given, each generation joins its caller's trace with a span."""

    async def guard(request: Request[Any, Any, Any]) -> None:
        require_worker_token(request.headers.get("authorization"), token)

    @post("/internal/generate", status_code=200)
    async def generate(
        data: JSONBody[GenerateCall], _auth: NamedDependency[None], request: Request[Any, Any, Any]
    ) -> Stream:
        return await _generate(data, runtime, spans, request.headers.get("traceparent"))

    @post("/internal/embed", status_code=200)
    async def embed(data: JSONBody[EmbedCall], _auth: NamedDependency[None]) -> EmbedResult:
        return await _embed(data, runtime)

    @get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @get("/metrics", media_type=CONTENT_TYPE_LATEST)
    async def metrics() -> Response[bytes]:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return Litestar(
        [generate, embed, healthz, metrics],
        dependencies={"_auth": Provide(guard)},
        exception_handlers=EXCEPTION_HANDLERS,
        openapi_config=None,
        logging_config=None,
    )


def run_worker(settings: WorkerSettings) -> None:
    prefix = f"worker {settings.worker_id} "
    configure_logging(settings.log_level, settings.log_format, prefix, worker=settings.worker_id)
    configure_torch(settings.engine)
    registry = CollectorRegistry()
    metrics = EngineMetrics(registry)
    runtime = WorkerRuntime(settings.engine, metrics.observe_step, metrics.observe_batch)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    host, port = sock.getsockname()[:2]
    address = f"http://{settings.advertise_host or host}:{port}"
    spans = WorkerSpans.of(settings.tracing, settings.worker_id, metrics.spans_dropped)
    app = build_worker_app(runtime, settings.worker_token, registry, spans)
    link = GatewayLinks(settings, runtime, address)

    async def drain() -> None:
        """Tell the gateways at once (the heartbeat shows every engine draining, so no new
        request comes), then wait for the running ones, up to the bound."""
        await link.beat()
        for _ in range(int(settings.drain_timeout_s / DRAIN_POLL_S)):
            if not runtime.busy():
                return
            await asyncio.sleep(DRAIN_POLL_S)

    timeout = int(settings.drain_timeout_s)
    config = uvicorn.Config(app, log_level=settings.log_level, timeout_graceful_shutdown=timeout)
    server = DrainingServer(config, runtime.drain_all, drain)

    async def main() -> None:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        beating = asyncio.create_task(link.run())
        log.info("worker %s listening on %s", settings.worker_id, address)
        await asyncio.wait({serving, beating}, return_when=asyncio.FIRST_COMPLETED)
        server.should_exit = True
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
        await serving
        await link.close()
        runtime.close()

    asyncio.run(main())
