"""The long-lived parts of a running server, built once from the settings."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from sqlalchemy.ext.asyncio import AsyncEngine

from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.model_versions import ModelVersionService
from vigil.platform.gateway.embeddings import EmbeddingService
from vigil.platform.gateway.generation import GenerationService
from vigil.platform.gateway.models import ModelDirectory
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


def build_services(settings: ServeSettings) -> Services:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    observers = Observers(
        step=lambda name: step_observer(metrics, name),
        batch=lambda name: batch_observer(metrics, name),
    )
    worker = LocalWorker(settings.models, settings.engine, observers)
    live = LiveSeries()
    models = ModelDirectory(worker)
    registry.register(EngineStatsCollector(models.snapshots))
    recorder = RequestRecorder(metrics, live)
    db = create_engine(settings.resolved_database_url)
    return Services(
        settings=settings,
        worker=worker,
        registry=registry,
        live=live,
        models=models,
        generation=GenerationService(models, recorder, settings.engine.max_queue_wait_s),
        embedding=EmbeddingService(models, recorder),
        db=db,
        versions=ModelVersionService(session_factory(db)),
    )


def live_gauges(models: ModelDirectory) -> Gauges:
    snaps = models.snapshots()
    return Gauges(
        num_waiting=sum(s.stats.num_waiting for s in snaps),
        num_running=sum(s.stats.num_running for s in snaps),
        kv_cache_usage=max((s.stats.kv_cache_usage for s in snaps), default=0.0),
    )
