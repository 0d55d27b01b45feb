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
from pathlib import Path

import torch

from vigil.engine.artifacts import resolve_artifact, verify_checksum
from vigil.engine.async_engine import AsyncLLMEngine, StepObserver
from vigil.engine.bundled import ModelKind, ModelSource
from vigil.engine.device import free_memory_bytes, resolve_device, resolve_dtype
from vigil.engine.embed_batcher import AsyncEmbedder, BatcherConfig, BatchObserver
from vigil.engine.llm_engine import EngineConfig, LLMEngine
from vigil.engine.loaders.embedder import load_embedding_model
from vigil.engine.loaders.llm import LanguageModel, load_language_model
from vigil.platform.control.specs import VersionRef, bundled_version
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


DEFAULT_CPU_KV_BYTES = 1 << 30
DEFAULT_CUDA_KV_FRACTION = 0.8


def kv_cache_budget(settings: EngineSettings, device: torch.device) -> int:
    """Bytes for the KV cache, resolved after the weights are loaded so that a
    fraction means a fraction of what is left."""
    if settings.kv_cache_memory_bytes is not None:
        return settings.kv_cache_memory_bytes
    fraction = settings.kv_cache_memory_fraction
    if fraction is None and device.type == "cuda":
        fraction = DEFAULT_CUDA_KV_FRACTION
    if fraction is None:
        return DEFAULT_CPU_KV_BYTES
    return int(free_memory_bytes(device) * fraction)


def configure_torch(settings: EngineSettings) -> None:
    threads = settings.torch_threads or max(1, (os.cpu_count() or 2) - 1)
    torch.set_num_threads(threads)


@dataclass(frozen=True, slots=True)
class Observers:
    """Per-model callbacks the engines run after each step or batch (metrics)."""

    step: Callable[[str], StepObserver]
    batch: Callable[[str], BatchObserver]


@dataclass(frozen=True, slots=True)
class EngineSlot:
    """One generation engine to run. Each version in use gets one (its key is the
    version's key); a version that a deployment's long-prompt pool uses gets a second
    (`<key>#long`). Slots of one version share its weights; each has its own KV cache
    and queue."""

    key: str
    version: VersionRef
    max_num_seqs: int | None = None  # None: the engine setting


class LocalWorker:
    def __init__(
        self,
        slots: list[EngineSlot],
        embed_models: list[str],
        settings: EngineSettings,
        observers: Observers | None = None,
    ) -> None:
        self.settings = settings
        self.slots = slots
        self._observers = observers
        versions = list(dict.fromkeys(slot.version for slot in slots))
        self.versions = versions + [bundled_version(name) for name in embed_models]
        self.llms: dict[str, AsyncLLMEngine] = {}  # by slot key
        self.embedders: dict[str, AsyncEmbedder] = {}  # by model name
        self.states = {v.key: ModelState.LOADING for v in self.versions}  # by version key
        self.errors: dict[str, str] = {}
        self._weights: dict[tuple[str, str | None, torch.dtype], LanguageModel] = {}

    @property
    def ready(self) -> bool:
        return all(state is ModelState.READY for state in self.states.values())

    def embed_version(self, model: str) -> VersionRef | None:
        return next(
            (v for v in self.versions if v.kind is ModelKind.EMBED and v.model == model), None
        )

    async def load_all(self, on_change: StateListener | None = None) -> None:
        device = resolve_device(self.settings.device)
        for version in self.versions:
            key = version.key
            dtype = resolve_dtype(version.param("dtype", self.settings.dtype), device)
            t0 = time.monotonic()
            log.info("loading %s from %s", version.key, version.artifact)
            try:
                source = resolve_artifact(
                    version.model, version.version, version.artifact, version.kind, version.format
                )
                if on_change:
                    await on_change(ModelStateChange(source, ModelState.LOADING))
                await asyncio.to_thread(self._load, version, source, device, dtype)
            except Exception as exc:
                log.exception("loading %s failed", version.key)
                self.states[key] = ModelState.FAILED
                self.errors[key] = str(exc)
                if on_change:
                    failed = ModelSource(
                        version.model,
                        version.kind,
                        version.format,
                        Path(version.artifact),
                        version.version,
                    )
                    await on_change(ModelStateChange(failed, ModelState.FAILED, str(exc)))
                continue
            self.states[key] = ModelState.READY
            log.info(
                "%s ready on %s (%s) in %.1f s", version.key, device, dtype, time.monotonic() - t0
            )
            if on_change:
                await on_change(ModelStateChange(source, ModelState.READY))

    def _load(
        self, version: VersionRef, source: ModelSource, device: torch.device, dtype: torch.dtype
    ) -> None:
        verify_checksum(source, version.checksum)
        s = self.settings
        if source.kind is ModelKind.EMBED:
            model = load_embedding_model(source, device, dtype)
            on_batch = self._observers.batch(source.name) if self._observers else None
            embedder = AsyncEmbedder(
                model, BatcherConfig(s.embed_max_batch_size, s.embed_max_wait_ms), on_batch
            )
            self._start_soon(embedder.start)
            self.embedders[source.name] = embedder
            return
        # Versions of one artifact (differing in sampling defaults) share its weights.
        weights_key = (version.artifact, version.checksum, dtype)
        lm = self._weights.get(weights_key)
        if lm is None:
            lm = self._weights[weights_key] = load_language_model(source, device, dtype)
        for slot in (slot for slot in self.slots if slot.version == version):
            config = EngineConfig(
                block_size=s.block_size,
                kv_cache_memory_bytes=kv_cache_budget(s, device),
                max_num_seqs=slot.max_num_seqs or s.max_num_seqs,
                max_num_batched_tokens=s.max_num_batched_tokens,
                max_model_len=s.max_model_len,
                enable_prefix_caching=s.enable_prefix_caching,
                batch_aging_s=s.batch_aging_s,
            )
            on_step = self._observers.step(slot.key) if self._observers else None
            engine = AsyncLLMEngine(LLMEngine(lm, config), on_step=on_step)
            self._start_soon(engine.start)
            self.llms[slot.key] = engine

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
