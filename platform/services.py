"""The long-lived parts of a running server, built once from the settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from sqlalchemy.ext.asyncio import AsyncEngine

from vigil.engine.bundled import ModelKind, bundled_source
from vigil.engine.request import Priority
from vigil.engine.stats import StepStats
from vigil.platform.control.api_keys import ApiKeyService
from vigil.platform.control.config_file import load_deployments
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.model_versions import ModelVersionService
from vigil.platform.control.specs import (
    ClassLimits,
    DeploymentSpec,
    bundled_version,
    default_limits,
)
from vigil.platform.gateway.auth import Authenticator, AuthMode
from vigil.platform.gateway.embeddings import EmbeddingService
from vigil.platform.gateway.generation import GenerationService
from vigil.platform.gateway.load import LoadTracker
from vigil.platform.gateway.models import ModelDirectory, engine_slots
from vigil.platform.settings import ServeSettings
from vigil.platform.telemetry.live import Gauges, LiveSeries
from vigil.platform.telemetry.metrics import (
    EngineStatsCollector,
    Metrics,
    batch_observer,
    step_observer,
)
from vigil.platform.telemetry.recorder import RequestRecorder
from vigil.platform.worker.local import LocalWorker, Observers


@dataclass(slots=True)
class Services:
    settings: ServeSettings
    worker: LocalWorker
    registry: CollectorRegistry
    live: LiveSeries
    models: ModelDirectory
    generation: GenerationService
    embedding: EmbeddingService
    db: AsyncEngine
    versions: ModelVersionService
    auth: Authenticator


def deployment_specs(settings: ServeSettings) -> tuple[list[DeploymentSpec], list[str]]:
    """The deployments to serve (from the config file, or one per bundled generation
    model at its bundled version) and the embedding models."""
    sources = {name: bundled_source(name) for name in settings.models}
    generate = [n for n, s in sources.items() if s.kind is ModelKind.GENERATE]
    embed = [n for n, s in sources.items() if s.kind is ModelKind.EMBED]
    if settings.config_path is not None:
        return load_deployments(settings.config_path, set(generate)), embed
    wait_s = settings.engine.max_queue_wait_s
    specs = []
    for name in generate:
        limits = default_limits()
        base = limits[Priority.INTERACTIVE]
        limits[Priority.INTERACTIVE] = ClassLimits(base.max_queue, wait_s)
        specs.append(DeploymentSpec(name, bundled_version(name), limits=limits))
    return specs, embed


def build_services(settings: ServeSettings) -> Services:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    deployments, embed_models = deployment_specs(settings)
    loads: dict[str, LoadTracker] = {}

    def on_step(key: str) -> Callable[[StepStats], None]:
        record = step_observer(metrics, key)
        load = loads[key]

        def observe(step: StepStats) -> None:
            record(step)
            load.observe_step(step)

        return observe

    observers = Observers(step=on_step, batch=lambda name: batch_observer(metrics, name))
    worker = LocalWorker(engine_slots(deployments), embed_models, settings.engine, observers)
    models = ModelDirectory(worker, deployments)
    loads.update(models.loads)
    live = LiveSeries()
    registry.register(EngineStatsCollector(models.snapshots))
    recorder = RequestRecorder(metrics, live)
    db = create_engine(settings.resolved_database_url)
    sessions = session_factory(db)
    return Services(
        settings=settings,
        worker=worker,
        registry=registry,
        live=live,
        models=models,
        generation=GenerationService(models, recorder),
        embedding=EmbeddingService(models, recorder),
        db=db,
        versions=ModelVersionService(sessions),
        auth=Authenticator(ApiKeyService(sessions), AuthMode(settings.auth)),
    )


def live_gauges(models: ModelDirectory) -> Gauges:
    snaps = models.snapshots()
    return Gauges(
        num_waiting=sum(s.stats.num_waiting for s in snaps),
        num_running=sum(s.stats.num_running for s in snaps),
        kv_cache_usage=max((s.stats.kv_cache_usage for s in snaps), default=0.0),
    )
