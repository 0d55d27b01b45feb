"""A gateway's neighbours, in process: workers and engines the tests control.

- `tiny_language_model`: a random-weight Llama (2 layers, hidden 64) with a real
  tokenizer, loaded through the same loader as real weights. It runs the real engine
  (scheduler, KV cache, sampler) in milliseconds a step.
- `ScriptedEngine`: the engine's `generate` contract with the clock in the test's hands:
  a request waits in its queue until the test lets it start (or its deadline passes),
  then streams a fixed number of tokens for each of its choices.
- `minilm_tokenizer`: the bundled embedding model's tokenizer, which the gateway
  tokenizes embeddings with (the generation tokenizer is the test's to pass).
- `FakeWorkers`: the gateway's WorkerLink, in process. Each fake worker registers and
  heart-beats into the gateway's WorkerRegistry as a worker process does, and runs
  either kind of engine, with the worker's own copy of each request's clock; a worker
  set to dead stops heart-beating and cannot be reached.
- `gateway_client`: the whole gateway (`build_services` + `create_app`) on its own
  SQLite database, with FakeWorkers behind it, called in the test's own event loop:
  what most gateway tests need. `running_gateway`: the same under a real uvicorn server
  on 127.0.0.1, for what only a server does (a stream read as it comes, a client that
  hangs up, the peer's address, another process calling in).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import torch
import uvicorn
from litestar import Litestar

from vigil.engine.async_engine import AsyncLLMEngine
from vigil.engine.bundled import MINILM, ModelKind, bundled_source
from vigil.engine.llm_engine import EngineConfig, LLMEngine
from vigil.engine.loaders.assembly import assemble_decoder
from vigil.engine.loaders.embedder_tokenizer import read_embedding_tokenizer
from vigil.engine.loaders.llm import LanguageModel
from vigil.engine.model.config import DecoderConfig
from vigil.engine.precision import Precision
from vigil.engine.request import (
    EngineEvent,
    FinishEvent,
    FinishReason,
    GenerationRequest,
    RequestClock,
    RequestId,
    StepTimes,
    TokenEvent,
)
from vigil.engine.runner import kv_bytes_per_token
from vigil.engine.stats import EngineStats
from vigil.engine.tokenizer import Tokenizer
from vigil.platform.app import create_app
from vigil.platform.control.migrate import migrate
from vigil.platform.forecast.costs import StepCosts
from vigil.platform.gateway.link import WorkerUnreachable
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.gateway.workers import Replica, WorkerRegistry
from vigil.platform.services import Services, build_services
from vigil.platform.settings import ServeSettings
from vigil.platform.wire.worker import (
    CostsWire,
    EmbedResult,
    Heartbeat,
    RegisterRequest,
    SlotLimits,
    SlotReport,
    StatsWire,
)

HEARTBEAT_INTERVAL_S = 0.5


def tiny_language_model(tokenizer: Tokenizer, seed: int = 0) -> LanguageModel:
    cfg = DecoderConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position=4096,
        tie_word_embeddings=True,
    )
    g = torch.Generator().manual_seed(seed)

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.05

    h, ffn = cfg.hidden_size, cfg.intermediate_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    weights = {"model.embed_tokens.weight": w(cfg.vocab_size, h), "model.norm.weight": w(h) + 1}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        weights |= {
            f"{p}input_layernorm.weight": w(h) + 1,
            f"{p}post_attention_layernorm.weight": w(h) + 1,
            f"{p}self_attn.q_proj.weight": w(q, h),
            f"{p}self_attn.k_proj.weight": w(kv, h),
            f"{p}self_attn.v_proj.weight": w(kv, h),
            f"{p}self_attn.o_proj.weight": w(h, q),
            f"{p}mlp.gate_proj.weight": w(ffn, h),
            f"{p}mlp.up_proj.weight": w(ffn, h),
            f"{p}mlp.down_proj.weight": w(h, ffn),
        }
    precision = Precision("none", "float32", "built")
    model = assemble_decoder(cfg, weights.items(), precision, torch.float32, torch.device("cpu"))
    cpu = torch.device("cpu")
    return LanguageModel("tiny", cfg, model, tokenizer, cpu, torch.float32, precision)


_MINILM_READ = threading.Lock()


def minilm_tokenizer() -> Tokenizer:
    """The bundled MiniLM's tokenizer alone (no weights), read once a session: what the
    gateway tokenizes every embedding version's input with in these tests. Locked: the
    gateway loads each version's tokenizer in a thread of its own."""
    with _MINILM_READ:
        return _minilm_tokenizer()


@functools.cache
def _minilm_tokenizer() -> Tokenizer:
    return read_embedding_tokenizer(bundled_source(MINILM).path)


def tiny_engine(lm: LanguageModel, max_num_seqs: int = 8, num_blocks: int = 256) -> AsyncLLMEngine:
    config = EngineConfig(
        block_size=16,
        kv_cache_memory_bytes=kv_bytes_per_token(lm) * 16 * num_blocks,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=512,
        native_attention=False,  # no C++ build for a model this small
    )
    return AsyncLLMEngine(LLMEngine(lm, config))


class Engine(Protocol):
    def generate(self, request: GenerationRequest) -> AsyncIterator[EngineEvent]: ...

    def stats(self) -> EngineStats: ...


@dataclass
class ScriptedEngine:
    """Each request waits in its queue until `release` lets it start (or its deadline
    passes: then it times out, as the engine's scheduler does), then streams
    `num_tokens` tokens of `text` and finishes with LENGTH."""

    num_tokens: int = 3
    text: str = "ok "
    auto_release: bool = False
    token_gap_s: float = 0.0
    step_times: StepTimes | None = None  # what its finish events report
    waiting: dict[RequestId, asyncio.Event] = field(default_factory=dict)
    arrived: list[GenerationRequest] = field(default_factory=list)
    aborted: list[RequestId] = field(default_factory=list)
    num_running: int = 0

    def release(self, n: int | None = None) -> None:
        """Let the oldest `n` waiting requests (all when None) start."""
        for gate in list(self.waiting.values())[:n]:
            gate.set()

    async def generate(self, request: GenerationRequest) -> AsyncIterator[EngineEvent]:
        rid, clock = request.request_id, request.clock
        self.arrived.append(request)
        gate = self.waiting[rid] = asyncio.Event()
        if self.auto_release:
            gate.set()
        finished = False
        try:
            deadline_s = (
                None if request.deadline_ts is None else request.deadline_ts - clock.arrival_ts
            )
            try:
                await asyncio.wait_for(gate.wait(), deadline_s)
            except TimeoutError:
                clock.finished_ts = time.monotonic()
                finished = True
                yield FinishEvent(FinishReason.TIMEOUT, "", len(request.prompt_ids), 0, clock)
                return
            del self.waiting[rid]
            clock.scheduled_ts = time.monotonic()
            self.num_running += 1
            choices = range(request.params.n)
            for i in range(self.num_tokens):
                if i and self.token_gap_s:
                    await asyncio.sleep(self.token_gap_s)
                for c in choices:
                    yield TokenEvent(self.text, (i + 10,), time.monotonic(), index=c)
            clock.finished_ts = time.monotonic()
            finished = True
            num_prompt = len(request.prompt_ids)
            for c in choices:
                yield FinishEvent(
                    FinishReason.LENGTH,
                    "",
                    num_prompt,
                    self.num_tokens,
                    clock,
                    index=c,
                    step_times=self.step_times,
                )
        finally:
            self.waiting.pop(rid, None)
            if clock.scheduled_ts is not None:
                self.num_running -= 1
            if not finished:
                self.aborted.append(rid)

    def stats(self) -> EngineStats:
        return EngineStats(len(self.waiting), 0, self.num_running, 100, 0, 0, 0, 0, 0, 0, None)


@dataclass
class FakeEmbedder:
    """Vectors of the rows' lengths in tokens, as the worker gets them: token ids."""

    arrived: list[list[list[int]]] = field(default_factory=list)  # each call's rows

    async def embed(self, token_ids: list[list[int]]) -> EmbedResult:
        self.arrived.append(token_ids)
        return EmbedResult([[float(len(row)), 1.0] for row in token_ids])


@dataclass
class FakeWorker:
    id: str
    engines: dict[str, Engine | FakeEmbedder]
    limits: SlotLimits
    costs: StepCosts | None = None  # what the engines' steps cost, as reported
    alive: bool = True  # a dead one neither heart-beats nor answers
    failed: dict[str, str] = field(default_factory=dict)  # engine key -> its load error

    def heartbeat(self) -> Heartbeat:
        slots = []
        for key, engine in self.engines.items():
            if key in self.failed:
                slots.append(SlotReport(key, "failed", 0.0, self.failed[key]))
                continue
            stats = StatsWire.of(engine.stats()) if not isinstance(engine, FakeEmbedder) else None
            limits = None if isinstance(engine, FakeEmbedder) else self.limits
            costs = None if self.costs is None or limits is None else CostsWire.of(self.costs)
            report = SlotReport(key, "ready", 1.0, None, limits, stats, costs)
            slots.append(report)
        return Heartbeat(slots)


class FakeWorkers:
    """The gateway's WorkerLink to in-process workers (see the module docstring)."""

    def __init__(self) -> None:
        self.registry: WorkerRegistry | None = None
        self.workers: dict[str, FakeWorker] = {}
        self.failed: list[str] = []
        self.trace_headers: list[dict[str, str]] = []  # what each open was sent

    def add(
        self,
        worker_id: str,
        engines: dict[str, Engine | FakeEmbedder],
        limits: SlotLimits | None = None,
        costs: StepCosts | None = None,
    ) -> FakeWorker:
        limits = limits or SlotLimits(
            max_model_len=4096, kv_capacity_tokens=4096, max_num_seqs=8, max_num_batched_tokens=512
        )
        worker = self.workers[worker_id] = FakeWorker(worker_id, engines, limits, costs)
        if self.registry is not None:
            self._register(worker)
        return worker

    def attach(self, registry: WorkerRegistry) -> None:
        self.registry = registry
        for worker in self.workers.values():
            self._register(worker)

    def _register(self, worker: FakeWorker) -> None:
        assert self.registry is not None
        address = f"fake://{worker.id}"
        self.registry.register(RegisterRequest(worker.id, address, "cpu", 1 << 30, 0))
        self.registry.heartbeat(worker.id, worker.heartbeat())

    def beat(self) -> None:
        for worker in self.workers.values():
            if self.registry is not None and worker.alive:
                self.registry.heartbeat(worker.id, worker.heartbeat())

    def _reach(self, replica: Replica) -> FakeWorker:
        worker = self.workers[replica.id]
        if not worker.alive:
            assert self.registry is not None
            self.registry.mark_failed(worker.id)
            raise WorkerUnreachable(f"worker {worker.id}: ConnectError")
        return worker

    async def open(
        self,
        replica: Replica,
        slot: str,
        request: GenerationRequest,
        trace_headers: Mapping[str, str] | None = None,
    ) -> AsyncGenerator[EngineEvent, None]:
        self.trace_headers.append(dict(trace_headers or {}))
        engine = self._reach(replica).engines[slot]
        assert not isinstance(engine, FakeEmbedder)
        # The worker's copy of the request: its own clock, as across a process boundary.
        own = GenerationRequest(
            request.request_id,
            list(request.prompt_ids),
            request.params,
            request.priority,
            RequestClock(time.monotonic()),
            request.deadline_ts,
        )
        return self._events(engine, own, request)

    async def _events(
        self, engine: Engine, own: GenerationRequest, request: GenerationRequest
    ) -> AsyncGenerator[EngineEvent, None]:
        events = engine.generate(own)
        unfinished = request.params.n
        try:
            async for event in events:
                if isinstance(event, TokenEvent):
                    yield dataclasses.replace(event, token_ts=time.monotonic())
                    continue
                clock = request.clock
                if event.clock.queue_time_s is not None:
                    clock.scheduled_ts = clock.arrival_ts + event.clock.queue_time_s
                yield dataclasses.replace(event, clock=clock)
                unfinished -= 1
                if not unfinished:
                    return
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    async def embed(self, replica: Replica, slot: str, token_ids: list[list[int]]) -> EmbedResult:
        engine = self._reach(replica).engines[slot]
        assert isinstance(engine, FakeEmbedder)
        return await engine.embed(token_ids)


@dataclass
class Gateway:
    url: str
    services: Services
    workers: FakeWorkers
    # gateway_client's: a client calling the app in process (running_gateway's: None)
    client: httpx.AsyncClient | None = None


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield  # the test runner keeps its own signal handlers


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """An ASGI app under a real uvicorn server on 127.0.0.1, in this event loop; its URL."""
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "the server did not start"
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def running_gateway(
    data_dir: Path,
    workers: FakeWorkers,
    tokenizer: Tokenizer,
    config: str | None = None,
    **settings: Any,
) -> AsyncIterator[Gateway]:
    async with (
        _gateway_services(data_dir, workers, tokenizer, config, **settings) as services,
        serving(create_app(services)) as url,
    ):
        yield Gateway(url, services, workers)


@contextlib.asynccontextmanager
async def gateway_client(
    data_dir: Path,
    workers: FakeWorkers,
    tokenizer: Tokenizer,
    config: str | None = None,
    **settings: Any,
) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    """The gateway of `running_gateway` with no server: its app called in this event loop
    (httpx's ASGI transport, the peer 127.0.0.1), its lifespan run around the test.
    Answers come whole: a test that reads a stream as it comes, or hangs up, needs
    `running_gateway`. (Litestar's own AsyncTestClient runs the app on a thread of its own
    and blocks this loop for each request, so the fakes' heartbeats and a test's
    concurrent requests would stall.)"""
    async with _gateway_services(data_dir, workers, tokenizer, config, **settings) as services:
        app = create_app(services)
        transport = httpx.ASGITransport(app=app)
        async with (
            _lifespan(app),
            httpx.AsyncClient(transport=transport, base_url="http://gateway", timeout=30) as client,
        ):
            yield Gateway(str(client.base_url), services, workers, client), client


@contextlib.asynccontextmanager
async def _lifespan(app: Litestar) -> AsyncIterator[None]:
    """The app's lifespan in a task of its own, as a server runs it: entered and left in
    one task whichever tasks a fixture's set-up and tear-down run in."""
    started, stop = asyncio.Event(), asyncio.Event()

    async def run() -> None:
        async with app.lifespan():
            started.set()
            await stop.wait()

    task = asyncio.create_task(run())
    waiting = asyncio.create_task(started.wait())
    await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task.done():
        task.result()  # start-up failed: its error
    try:
        yield
    finally:
        stop.set()
        await task


@contextlib.asynccontextmanager
async def _gateway_services(
    data_dir: Path,
    workers: FakeWorkers,
    tokenizer: Tokenizer,
    config: str | None = None,
    **settings: Any,
) -> AsyncIterator[Services]:
    config_path = None
    if config is not None:
        config_path = data_dir / "vigil.toml"
        config_path.write_text(config)
    settings = {"auth": "open", **settings}
    serve = ServeSettings(data_dir=data_dir, config_path=config_path, **settings)
    await asyncio.to_thread(migrate, serve.resolved_database_url)
    services = build_services(
        serve,
        "worker-token",
        link=workers,
        tokenizers=TokenizerCache(
            lambda v: minilm_tokenizer() if v.kind is ModelKind.EMBED else tokenizer
        ),
    )
    await services.plane.declare(list(serve.models), serve.config_path)
    workers.attach(services.workers)
    beating = asyncio.create_task(_beat(workers, services))
    try:
        yield services
    finally:
        beating.cancel()


async def _beat(workers: FakeWorkers, services: Services) -> None:
    """Heartbeats, and what the gateway does on each (records version states)."""
    while True:
        workers.beat()
        await services.fleet.on_workers_changed()
        await asyncio.sleep(HEARTBEAT_INTERVAL_S)


async def report_loaded(plane: Any, model: str, version: str) -> None:
    """What the gateway records once a worker has a version ready: its status in the
    control plane, which promote and canary weights above 0 require."""
    from vigil.platform.control.versions.records import VersionStatus

    record = await plane.versions.get_version(model, version)
    await plane.versions.record(
        model=model,
        version=version,
        kind=record.ref.kind.value,
        format=record.ref.format.value,
        source=record.ref.artifact,
        status=VersionStatus.READY,
    )
