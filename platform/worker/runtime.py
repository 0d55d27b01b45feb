"""The engines of one worker process: load what the gateway assigns, drain what it no
longer does, and report how each is doing.

    assignment (slots) --reconcile--> load in a thread -> READY
                                      no longer assigned -> DRAINING -> stopped when idle

Loading runs in a background thread, so the worker keeps answering (and heart-beating)
while a model loads. A slot that is drained keeps serving the requests it has until
they end: promoting or rolling back a version never cuts an in-flight stream.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import torch

from vigil.engine.artifacts import resolve_artifact, verify_checksum
from vigil.engine.async_engine import AsyncLLMEngine
from vigil.engine.bundled import ModelKind
from vigil.engine.calibrate import calibrate
from vigil.engine.config import BatcherConfig, EngineConfig
from vigil.engine.device import free_memory_bytes, resolve_device, resolve_dtype
from vigil.engine.embed_batcher import AsyncEmbedder
from vigil.engine.llm_engine import LLMEngine
from vigil.engine.loaders.embedder import load_embedding_model
from vigil.engine.loaders.llm import LanguageModel, load_language_model
from vigil.engine.loaders.progress import report_progress
from vigil.engine.precision import Precision, runs_as
from vigil.engine.stats import BatchRecord, StepStats
from vigil.engine.threads import StepThreads
from vigil.platform.control.specs import VersionRef
from vigil.platform.settings import DEFAULT_CPU_KV_BYTES, DEFAULT_CUDA_KV_FRACTION, EngineSettings
from vigil.platform.worker.profile import StepProfile

log = logging.getLogger(__name__)

LOAD_WEIGHTS_SHARE = 0.9  # of a version's load progress: reading its weights


class SlotState(StrEnum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    DRAINING = "draining"


@dataclass(frozen=True, slots=True)
class EngineSlot:
    """One engine to run. Each version in use gets one (its key is the version's key);
    a version that a deployment's long-prompt pool uses gets a second (`<key>#long`).
    Slots of one version share its weights; each has its own KV cache and queue."""

    key: str
    version: VersionRef
    max_num_seqs: int | None = None  # None: the engine setting


def kv_cache_budget(settings: EngineSettings, device: torch.device) -> int:
    """Bytes for the KV cache, resolved after the weights are loaded so that a
    fraction means a fraction of what is left."""
    budget = settings.kv_cache_memory
    if isinstance(budget, int):  # bytes
        return budget
    if budget is None and device.type == "cuda":
        budget = DEFAULT_CUDA_KV_FRACTION
    if budget is None:
        return DEFAULT_CPU_KV_BYTES
    return int(free_memory_bytes(device) * budget)


def step_threads(settings: EngineSettings, cpus: int) -> StepThreads:
    """--torch-threads N: N threads for every step. Unset: the cores but one for small
    steps, leaving one to the gateway and the worker's event loop, and every core for
    large ones (engine/threads.py says why and what it measured)."""
    if settings.torch_threads:
        return StepThreads(settings.torch_threads, settings.torch_threads)
    return StepThreads(max(1, cpus - 1), cpus)


def configure_torch(settings: EngineSettings) -> None:
    """The process's default: what threads other than the engines' (the embedder) use."""
    torch.set_num_threads(step_threads(settings, os.cpu_count() or 1).small)


@dataclass(slots=True)
class Slot:
    spec: EngineSlot
    state: SlotState = SlotState.LOADING
    progress: float = 0.0
    error: str | None = None
    engine: AsyncLLMEngine | None = None
    embedder: AsyncEmbedder | None = None
    # What its steps cost (admission, routing, the planner): calibrated at load, then live.
    profile: StepProfile = field(default_factory=StepProfile)
    in_flight: int = 0  # requests the worker's API is serving on it
    precision: Precision | None = None  # what its weights run as and why, once loaded


StepHook = Callable[[str, StepStats], None]
BatchHook = Callable[[str, BatchRecord], None]


class WorkerRuntime:
    def __init__(
        self,
        settings: EngineSettings,
        on_step: StepHook | None = None,
        on_batch: BatchHook | None = None,
    ) -> None:
        self.settings = settings
        self.device = resolve_device(settings.device)
        self.slots: dict[str, Slot] = {}
        self._on_step = on_step
        self._on_batch = on_batch
        self._weights: dict[tuple[str, str | None, torch.dtype, str], LanguageModel] = {}
        self._loading: dict[str, asyncio.Task[None]] = {}  # by version key
        self._lock = asyncio.Lock()
        self.stopping = False  # draining everything before the process stops

    def drain_all(self) -> None:
        """Stop taking requests on every engine; the running ones go on. Assignments are
        ignored from now on."""
        self.stopping = True
        for key, slot in self.slots.items():
            if slot.state is not SlotState.DRAINING:
                log.info("draining %s", key)
                slot.state = SlotState.DRAINING
        self.stop_drained()

    def busy(self) -> bool:
        """Requests still in flight on some engine."""
        return any(s.in_flight > 0 for s in self.slots.values())

    def reconcile(self, desired: list[EngineSlot]) -> None:
        """Start loading new slots; drain the ones no longer assigned. A failed slot is
        not retried until its assignment changes."""
        if self.stopping:
            return
        wanted = {s.key: s for s in desired}
        for key, slot in self.slots.items():
            if key not in wanted:
                if slot.state is not SlotState.DRAINING:
                    log.info("draining %s", key)
                    slot.state = SlotState.DRAINING
            elif slot.state is SlotState.DRAINING:  # assigned again before it stopped
                built = slot.engine is not None or slot.embedder is not None
                slot.state = SlotState.READY if built else SlotState.LOADING
        for key, spec in wanted.items():
            existing = self.slots.get(key)
            if existing is None or (existing.state is SlotState.FAILED and existing.spec != spec):
                self.slots[key] = Slot(spec)
        loading = {
            s.spec.version
            for s in self.slots.values()
            if s.state is SlotState.LOADING and s.engine is None and s.embedder is None
        }
        for version in loading:
            if version.key not in self._loading:
                task = asyncio.create_task(self._load(version), name=f"load-{version.key}")
                self._loading[version.key] = task
        self.stop_drained()

    def stop_drained(self) -> None:
        """Stop draining slots that have no work left; free weights nobody uses."""
        for key in [k for k, s in self.slots.items() if s.state is SlotState.DRAINING]:
            slot = self.slots[key]
            busy = slot.in_flight > 0 or (
                slot.engine is not None
                and (slot.engine.stats().num_running or slot.engine.stats().num_waiting)
            )
            if not busy:
                if slot.engine is not None:
                    slot.engine.stop()
                if slot.embedder is not None:
                    slot.embedder.stop()
                del self.slots[key]
                log.info("stopped %s", key)
        in_use = {(s.spec.version.artifact, s.spec.version.checksum) for s in self.slots.values()}
        for wkey in [w for w in self._weights if (w[0], w[1]) not in in_use]:
            del self._weights[wkey]

    async def _load(self, version: VersionRef) -> None:
        slots = [
            s
            for s in self.slots.values()
            if s.spec.version == version and s.engine is None and s.embedder is None
        ]
        dtype = resolve_dtype(version.param("dtype", self.settings.dtype), self.device)
        t0 = time.monotonic()
        log.info("loading %s from %s", version.key, version.artifact)
        try:
            async with self._lock:  # one load at a time: memory and cores are shared
                engines = await asyncio.to_thread(self._build_reporting, version, dtype, slots)
            for slot in slots:
                slot.engine, slot.embedder = engines.get(slot.spec.key, (None, None))
                if slot.engine is not None:
                    slot.engine.start()
                if slot.embedder is not None:
                    slot.embedder.start()
                if slot.state is SlotState.LOADING:
                    slot.state = SlotState.READY
                slot.progress = 1.0
            precision = slots[0].precision if slots else None
            log.info(
                "%s ready on %s in %.1f s, running as %s",
                version.key,
                self.device,
                time.monotonic() - t0,
                "?" if precision is None else f"{runs_as(precision)} ({precision.reason})",
            )
        except Exception as exc:
            log.exception("loading %s failed", version.key)
            for slot in slots:
                slot.state, slot.error = SlotState.FAILED, str(exc)
        finally:
            self._loading.pop(version.key, None)

    def _build_reporting(
        self, version: VersionRef, dtype: torch.dtype, slots: list[Slot]
    ) -> dict[str, tuple[AsyncLLMEngine | None, AsyncEmbedder | None]]:
        """_build, with the weights read so far as the slots' progress (up to 0.9: the
        rest is building the engines and warming up), logged at every quarter."""
        logged = [0]

        def on_progress(fraction: float) -> None:
            for slot in slots:
                slot.progress = max(slot.progress, LOAD_WEIGHTS_SHARE * fraction)
            quarter = int(fraction * 4)
            if quarter > logged[0]:
                logged[0] = quarter
                log.info("loading %s: %d%% of the weights read", version.key, quarter * 25)

        with report_progress(on_progress):
            return self._build(version, dtype, slots)

    def _build(
        self, version: VersionRef, dtype: torch.dtype, slots: list[Slot]
    ) -> dict[str, tuple[AsyncLLMEngine | None, AsyncEmbedder | None]]:
        source = resolve_artifact(
            version.model, version.version, version.artifact, version.kind, version.format
        )
        verify_checksum(source, version.checksum)
        s = self.settings
        built: dict[str, tuple[AsyncLLMEngine | None, AsyncEmbedder | None]] = {}
        if version.kind is ModelKind.EMBED:
            model = load_embedding_model(source, self.device, dtype)
            name = str(dtype).removeprefix("torch.")
            for slot in slots:
                slot.precision = Precision("none", name, f"an embedder runs in --dtype: {name}")
                embedder = AsyncEmbedder(
                    model,
                    BatcherConfig(s.embed_max_batch_size, s.embed_max_wait_ms),
                    self._batch_hook(slot.spec.key),
                )
                built[slot.spec.key] = (None, embedder)
            return built
        # Versions of one artifact (differing in sampling defaults) share its weights.
        quantization = version.param("quantization", s.quantization)
        weights_key = (version.artifact, version.checksum, dtype, quantization)
        lm = self._weights.get(weights_key)
        if lm is None:
            lm = load_language_model(source, self.device, dtype, quantization)
            self._weights[weights_key] = lm
        for slot in slots:
            slot.precision = lm.precision
            config = EngineConfig(
                block_size=s.block_size,
                kv_cache_memory_bytes=kv_cache_budget(s, self.device),
                max_num_seqs=slot.spec.max_num_seqs or s.max_num_seqs,
                max_num_batched_tokens=s.max_num_batched_tokens,
                max_model_len=s.max_model_len,
                enable_prefix_caching=s.enable_prefix_caching,
                batch_aging_s=s.batch_aging_s,
                threads=step_threads(s, os.cpu_count() or 1),
            )
            core = LLMEngine(lm, config)
            t0 = time.monotonic()
            slot.profile.calibrate(calibrate(core))
            costs = slot.profile.costs()
            assert costs is not None, "a calibration measured no decode step"
            log.info(
                "%s calibrated in %.1f s: %s", slot.spec.key, time.monotonic() - t0, costs.summary()
            )
            built[slot.spec.key] = (AsyncLLMEngine(core, on_step=self._step_hook(slot)), None)
        return built

    def _batch_hook(self, key: str) -> Callable[[BatchRecord], None] | None:
        hook = self._on_batch
        if hook is None:
            return None
        return lambda batch: hook(key, batch)

    def _step_hook(self, slot: Slot) -> Callable[[StepStats], None]:
        key, profile, hook = slot.spec.key, slot.profile, self._on_step

        def observe(step: StepStats) -> None:
            profile.observe(step)
            if hook is not None:
                hook(key, step)

        return observe

    def ready_slot(self, key: str) -> Slot | None:
        slot = self.slots.get(key)
        if slot is None or slot.state not in (SlotState.READY, SlotState.DRAINING):
            return None
        return slot

    def close(self) -> None:
        for task in self._loading.values():
            task.cancel()
        for slot in self.slots.values():
            if slot.engine is not None:
                slot.engine.stop()
            if slot.embedder is not None:
                slot.embedder.stop()
        self.slots.clear()
