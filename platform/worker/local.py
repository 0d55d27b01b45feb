"""The in-process worker: loads the configured models and runs their engines.

Loading happens in a background thread after the server starts, so /healthz
answers at once and /readyz turns ready when every model is loaded.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

import torch

from vigil.engine.async_engine import AsyncLLMEngine, StepObserver
from vigil.engine.bundled import ModelKind, ModelSource, bundled_source
from vigil.engine.device import resolve_device, resolve_dtype
from vigil.engine.embed_batcher import AsyncEmbedder, BatcherConfig
from vigil.engine.llm_engine import EngineConfig, LLMEngine
from vigil.engine.loaders.embedder import load_embedding_model
from vigil.engine.loaders.llm import load_language_model
from vigil.platform.settings import EngineSettings

log = logging.getLogger(__name__)


class ModelState(StrEnum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ModelStateChange:
    source: ModelSource
    state: ModelState
    error: str | None = None


StateListener = Callable[[ModelStateChange], Awaitable[None]]


def configure_torch(settings: EngineSettings) -> None:
    threads = settings.torch_threads or max(1, (os.cpu_count() or 2) - 1)
    torch.set_num_threads(threads)


StepObserverFactory = Callable[[str], StepObserver]


class LocalWorker:
    def __init__(
        self,
        model_names: tuple[str, ...],
        settings: EngineSettings,
        step_observer: StepObserverFactory | None = None,
    ) -> None:
        self.settings = settings
        self._step_observer = step_observer
        self.sources = [bundled_source(name) for name in model_names]
        self.llms: dict[str, AsyncLLMEngine] = {}
        self.embedders: dict[str, AsyncEmbedder] = {}
        self.states: dict[str, ModelState] = {s.name: ModelState.LOADING for s in self.sources}
        self.errors: dict[str, str] = {}

    @property
    def ready(self) -> bool:
        return all(state is ModelState.READY for state in self.states.values())

    async def load_all(self, on_change: StateListener | None = None) -> None:
        device = resolve_device(self.settings.device)
        dtype = resolve_dtype(self.settings.dtype, device)
        for source in self.sources:
            if on_change:
                await on_change(ModelStateChange(source, ModelState.LOADING))
            t0 = time.monotonic()
            log.info("loading %s (%s) from %s", source.name, source.format, source.path)
            try:
                await asyncio.to_thread(self._load, source, device, dtype)
            except Exception as exc:
                log.exception("loading %s failed", source.name)
                self.states[source.name] = ModelState.FAILED
                self.errors[source.name] = str(exc)
                if on_change:
                    await on_change(ModelStateChange(source, ModelState.FAILED, str(exc)))
                continue
            self.states[source.name] = ModelState.READY
            log.info(
                "%s ready on %s (%s) in %.1f s", source.name, device, dtype, time.monotonic() - t0
            )
            if on_change:
                await on_change(ModelStateChange(source, ModelState.READY))

    def _load(self, source: ModelSource, device: torch.device, dtype: torch.dtype) -> None:
        s = self.settings
        if source.kind is ModelKind.GENERATE:
            lm = load_language_model(source, device, dtype)
            config = EngineConfig(
                block_size=s.block_size,
                kv_cache_memory_bytes=s.kv_cache_memory_bytes,
                max_num_seqs=s.max_num_seqs,
                max_num_batched_tokens=s.max_num_batched_tokens,
                max_model_len=s.max_model_len,
                enable_prefix_caching=s.enable_prefix_caching,
                batch_aging_s=s.batch_aging_s,
            )
            observer = self._step_observer(source.name) if self._step_observer else None
            engine = AsyncLLMEngine(LLMEngine(lm, config), on_step=observer)
            self._start_soon(engine.start)
            self.llms[source.name] = engine
        else:
            model = load_embedding_model(source, device, dtype)
            embedder = AsyncEmbedder(
                model, BatcherConfig(s.embed_max_batch_size, s.embed_max_wait_ms)
            )
            self._start_soon(embedder.start)
            self.embedders[source.name] = embedder

    def _start_soon(self, start: Callable[[], None]) -> None:
        # start() binds to the running event loop, so it must run on it, not here
        # in the loading thread.
        future = asyncio.run_coroutine_threadsafe(_call(start), self._loop)
        future.result()

    async def start(self, on_change: StateListener | None = None) -> asyncio.Task[None]:
        self._loop = asyncio.get_running_loop()
        return asyncio.create_task(self.load_all(on_change), name="load-models")

    def stop(self) -> None:
        for engine in self.llms.values():
            engine.stop()
        for embedder in self.embedders.values():
            embedder.stop()


async def _call(fn: Callable[[], None]) -> None:
    fn()
