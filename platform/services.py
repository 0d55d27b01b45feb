"""The long-lived parts of a running gateway, built once from the settings."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import httpx
from prometheus_client import CollectorRegistry
from sqlalchemy.ext.asyncio import AsyncEngine

from vigil.engine.bundled import ModelKind, bundled_source
from vigil.engine.request import Priority
from vigil.platform.control.api_keys import ApiKeyService
from vigil.platform.control.config_file import load_deployments
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.model_versions import ModelVersionService, VersionStatus
from vigil.platform.control.specs import (
    ClassLimits,
    DeploymentSpec,
    VersionRef,
    bundled_version,
    default_limits,
)
from vigil.platform.gateway.auth import Authenticator, AuthMode
from vigil.platform.gateway.embeddings import EmbeddingService
from vigil.platform.gateway.generation import GenerationService
from vigil.platform.gateway.models import ModelDirectory
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.gateway.workers import WorkerRegistry
from vigil.platform.settings import ServeSettings
from vigil.platform.telemetry.live import Gauges, LiveSeries
from vigil.platform.telemetry.metrics import EngineStatsCollector, Metrics
from vigil.platform.telemetry.recorder import RequestRecorder

log = logging.getLogger(__name__)

_STATUS = {
    "loading": VersionStatus.LOADING,
    "ready": VersionStatus.READY,
    "failed": VersionStatus.FAILED,
}


@dataclass(slots=True)
class Services:
    settings: ServeSettings
    registry: CollectorRegistry
    workers: WorkerRegistry
    live: LiveSeries
    models: ModelDirectory
    generation: GenerationService
    embedding: EmbeddingService
    db: AsyncEngine
    versions: ModelVersionService
    auth: Authenticator
    http: httpx.AsyncClient
    worker_token: str
    _recorded: dict[str, str] = field(default_factory=dict)  # version key -> state in db

    async def on_workers_changed(self) -> None:
        """Record version states that changed (ready on some worker, failed on all)."""
        for version in self.models.versions_in_use():
            state = self.models.version_states().get(version.key, "loading")
            if self._recorded.get(version.key) != state:
                self._recorded[version.key] = state
                await self._record(version, state)

    async def _record(self, version: VersionRef, state: str) -> None:
        errors = [r.error for r in self.workers.slot_states(version.key) if r.error]
        try:
            await self.versions.record(
                model=version.model,
                version=version.version,
                kind=version.kind.value,
                format=version.format.value,
                source=version.artifact,
                status=_STATUS[state],
                error=errors[0] if errors else None,
            )
        except Exception:  # serving goes on when the database is unreachable
            log.exception("could not record the state of %s", version.key)


def deployment_specs(settings: ServeSettings) -> tuple[list[DeploymentSpec], list[VersionRef]]:
    """The deployments to serve (from the config file, or one per bundled generation
    model at its bundled version) and the embedding model versions."""
    sources = {name: bundled_source(name) for name in settings.models}
    generate = [n for n, s in sources.items() if s.kind is ModelKind.GENERATE]
    embed = [bundled_version(n) for n, s in sources.items() if s.kind is ModelKind.EMBED]
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


def build_services(settings: ServeSettings, worker_token: str) -> Services:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    deployments, embed = deployment_specs(settings)
    workers = WorkerRegistry()
    http = httpx.AsyncClient(
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64)
    )
    models = ModelDirectory(workers, TokenizerCache(), http, worker_token, embed)
    models.deployments = {d.name: d for d in deployments}  # tokenizers start in lifespan
    live = LiveSeries()
    registry.register(EngineStatsCollector(models.snapshots))
    recorder = RequestRecorder(metrics, live)
    db = create_engine(settings.resolved_database_url)
    sessions = session_factory(db)
    return Services(
        settings=settings,
        registry=registry,
        workers=workers,
        live=live,
        models=models,
        generation=GenerationService(models, recorder),
        embedding=EmbeddingService(models, recorder),
        db=db,
        versions=ModelVersionService(sessions),
        auth=Authenticator(ApiKeyService(sessions), AuthMode(settings.auth)),
        http=http,
        worker_token=worker_token,
    )


def live_gauges(models: ModelDirectory) -> Gauges:
    snaps = models.snapshots()
    return Gauges(
        num_waiting=sum(s.stats.num_waiting for s in snaps),
        num_running=sum(s.stats.num_running for s in snaps),
        kv_cache_usage=max((s.stats.kv_cache_usage for s in snaps), default=0.0),
    )
