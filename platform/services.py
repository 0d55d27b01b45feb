"""The long-lived parts of a running gateway, built once from the settings."""

from __future__ import annotations

import logging
import random
import secrets
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry, Gauge
from sqlalchemy.ext.asyncio import AsyncEngine

from vigil.engine.bundled import ModelKind
from vigil.platform.alerts.connect import webhook_client
from vigil.platform.alerts.delivery import WebhookDelivery
from vigil.platform.alerts.links import public_base_url
from vigil.platform.control.changes import ChangeFeed
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.deployments.config_file import load_deployments
from vigil.platform.control.ownership import LoopOwnership
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.specs import DeploymentSpec
from vigil.platform.control.webhooks.addresses import WebhookAddressPolicy
from vigil.platform.gateway.auth import Authenticator, AuthMode
from vigil.platform.gateway.embeddings import EmbeddingService
from vigil.platform.gateway.fleet import FleetBook
from vigil.platform.gateway.lease import LoadBook
from vigil.platform.gateway.link import HttpWorkerLink, WorkerLink
from vigil.platform.gateway.pipeline import GenerationService
from vigil.platform.gateway.rate_limits import KeyRateLimits
from vigil.platform.gateway.router import Router
from vigil.platform.gateway.serving import LONG_POOL_SUFFIX, ServingView
from vigil.platform.gateway.shadow import ShadowMirror
from vigil.platform.gateway.shared_counts import SharedCounts
from vigil.platform.gateway.throttle import SignInThrottle
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.gateway.workers import WorkerRegistry
from vigil.platform.planning.measured import recovery
from vigil.platform.settings import ServeSettings
from vigil.platform.slo.actions import ActionBoard, Recovery
from vigil.platform.slo.loop import SLOLoop
from vigil.platform.slo.metrics import AlertsCollector, SLOCollector
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.telemetry.deployments import DeploymentSeries, EngineGauges
from vigil.platform.telemetry.live import Gauges, LiveSeries
from vigil.platform.telemetry.metrics import (
    EngineSnapshot,
    EngineStatsCollector,
    Metrics,
    RedisCollector,
    WorkerCollector,
)
from vigil.platform.telemetry.recorder import RequestRecorder
from vigil.platform.telemetry.tracing import Tracing, build_tracing

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Services:
    settings: ServeSettings
    registry: CollectorRegistry
    workers: WorkerRegistry
    fleet: FleetBook  # what the workers report, kept in the control plane
    live: LiveSeries
    view: ServingView
    tokenizers: TokenizerCache
    loads: LoadBook
    generation: GenerationService
    embedding: EmbeddingService
    db: AsyncEngine
    auth: Authenticator
    http: httpx.AsyncClient
    worker_token: str
    plane: ControlPlane
    sign_ins: SignInThrottle
    slos: SLOTracker
    actions: ActionBoard
    slo_loop: SLOLoop
    delivery: WebhookDelivery
    changes: ChangeFeed  # other gateways' admin writes, heard (PostgreSQL)
    loops: LoopOwnership  # whether this gateway runs the SLO loop and webhook delivery
    console_secret: str  # signs the console's CSRF tokens
    series: DeploymentSeries  # the console's live charts, per deployment
    tracing: Tracing | None  # None: tracing off
    draining: bool = False  # SIGTERM: /readyz fails while running requests finish

    async def load_serving_view(self) -> None:
        """Seed the bundled models, apply the deployments file, then serve what the
        database says (the file is declarations applied at start; the database rules)."""
        settings = self.settings
        await self.plane.seed_bundled(list(settings.models))
        if settings.config_path is not None:
            bundled = set(settings.models)
            specs = load_deployments(settings.config_path, bundled, self.plane.default_limits)
            await self.plane.apply_config(specs)
        await self.reload_serving_view()

    async def on_control_change(self) -> None:
        """After a write through this gateway's control plane: keys looked up again,
        the serving view read again."""
        self.auth.forget_keys()
        await self.reload_serving_view()

    async def on_loop_owner(self, owner: bool) -> None:
        """This gateway took the SLO loop and webhook delivery over (it picks up the
        alerts firing, so none is sent again), or handed them on (what it had switched
        on is switched off here; the new owner decides afresh)."""
        if owner:
            await self.slo_loop.start()
            self.plane.outbox_written.set()
        else:
            self.slo_loop.stand_down()

    async def reload_serving_view(self) -> None:
        specs = await self.plane.serving_view()
        self.view.set_deployments(specs)
        self.slos.set_targets({spec.name: spec.slo for spec in specs})
        self.generation.offered.forget({spec.name for spec in specs})
        for version in self.view.versions_in_use():
            if version.kind is ModelKind.GENERATE:
                self.tokenizers.get(version)  # start loading early


def build_services(
    settings: ServeSettings,
    worker_token: str,
    link: WorkerLink | None = None,
    tokenizers: TokenizerCache | None = None,
) -> Services:
    """The gateway's parts. `link` and `tokenizers` default to the real ones (HTTP to
    worker processes; tokenizers read from the model files); tests pass their own."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    workers = WorkerRegistry()
    http = httpx.AsyncClient(
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64)
    )
    link = link or HttpWorkerLink(http, worker_token, workers.mark_failed)
    tokenizers = tokenizers or TokenizerCache()
    view = ServingView(workers)
    live = LiveSeries()
    registry.register(EngineStatsCollector(lambda: engine_snapshots(workers)))
    registry.register(WorkerCollector(workers.liveness))
    slos = SLOTracker()
    actions = ActionBoard()
    registry.register(SLOCollector(slos))
    series = DeploymentSeries()
    recorder = RequestRecorder(metrics, live, slos, series)
    loads = LoadBook(recorder)
    router = Router(random.Random(), round_robin=settings.routing == "round_robin")
    db = create_engine(settings.resolved_database_url)
    # Open mode is only ever on a loopback host: a local receiver is then allowed.
    webhook_policy = WebhookAddressPolicy.of(
        settings.webhook_allow, allow_loopback=settings.auth == "open"
    )
    plane = ControlPlane(
        session_factory(db),
        model_dirs=settings.resolved_model_dirs,
        webhook_policy=webhook_policy,
        max_queue_wait_s=settings.max_queue_wait_s,
    )
    generation = GenerationService(
        view,
        tokenizers,
        router,
        loads,
        link,
        settings.max_prompt_chars,
        actions,
        ShadowMirror(metrics),
    )

    async def recover(spec: DeploymentSpec) -> Recovery | None:
        return await recovery(view, generation.offered, spec)

    slo_loop = SLOLoop(
        slos,
        actions,
        plane,
        lambda: view.deployments,
        lambda spec: view.serving(spec).key,
        recover=recover,
    )
    registry.register(AlertsCollector(lambda: slo_loop.firing))
    counts = SharedCounts(settings.throttle_storage_uri)
    if counts.redis is not None:
        registry.register(RedisCollector(lambda: (counts.redis_up, counts.num_redis_errors)))
    sign_ins = SignInThrottle(counts)
    loops = LoopOwnership(settings.resolved_database_url)
    Gauge(
        "vigil_loop_owner",
        "1 while this gateway runs the SLO loop and webhook delivery (one gateway does)",
        registry=registry,
    ).set_function(lambda: float(loops.is_owner))
    return Services(
        settings=settings,
        registry=registry,
        workers=workers,
        fleet=FleetBook(workers, view, tokenizers, plane),
        live=live,
        view=view,
        tokenizers=tokenizers,
        loads=loads,
        generation=generation,
        embedding=EmbeddingService(
            view, link, generation.placer, recorder, settings.max_prompt_chars
        ),
        db=db,
        auth=Authenticator(plane.keys, AuthMode(settings.auth), KeyRateLimits(counts)),
        http=http,
        worker_token=worker_token,
        plane=plane,
        sign_ins=sign_ins,
        slos=slos,
        tracing=build_tracing(settings.tracing, "vigil-gateway", metrics),
        actions=actions,
        slo_loop=slo_loop,
        delivery=WebhookDelivery(
            plane.outbox,
            webhook_client(webhook_policy),
            settings.webhook_max_age_s,
            wake=plane.outbox_written,
            attempt_timeout_s=settings.webhook_timeout_s,
            base_url=public_base_url(settings.external_url, settings.host, settings.port),
        ),
        changes=ChangeFeed(db),
        loops=loops,
        console_secret=settings.console_secret
        or read_or_make_secret(settings.data_dir / "console-secret"),
        series=series,
    )


def read_or_make_secret(path: Path) -> str:
    """The secret kept in `path`, made (readable by this user only) when there is none,
    so that the console's tokens outlive a restart."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    secret = secrets.token_urlsafe(32)
    path.write_text(secret + "\n")
    return secret


def engine_snapshots(workers: WorkerRegistry) -> list[EngineSnapshot]:
    return [EngineSnapshot(key, replica, stats) for key, replica, stats in workers.engine_stats()]


def sample_deployments(services: Services) -> None:
    """A point on each deployment's live charts: its engines' gauges (every worker's
    engines of its versions, long-prompt pools included), its SLO target, and what the
    SLO loop has switched on."""
    specs = list(services.view.deployments.values())
    snaps = engine_snapshots(services.workers)
    for spec in specs:
        keys = {v.key for v in spec.versions}
        mine = [s.stats for s in snaps if s.engine.removesuffix(LONG_POOL_SUFFIX) in keys]
        gauges = EngineGauges(
            num_waiting_interactive=sum(s.num_waiting_interactive for s in mine),
            num_waiting_batch=sum(s.num_waiting_batch for s in mine),
            num_running=sum(s.num_running for s in mine),
            kv_cache_usage=max((s.kv_cache_usage for s in mine), default=0.0),
        )
        actions = services.actions.get(spec.name)
        canary = spec.canary.key if spec.canary is not None else None
        services.series.keep_versions(spec.name, keys)
        services.series.sample(
            spec.name, gauges, spec.slo.ttft_p99_s, canary, actions.shed_batch, actions.fallback
        )
    services.series.forget({spec.name for spec in specs})


def live_gauges(workers: WorkerRegistry) -> Gauges:
    snaps = engine_snapshots(workers)
    return Gauges(
        num_waiting=sum(s.stats.num_waiting for s in snaps),
        num_running=sum(s.stats.num_running for s in snaps),
        kv_cache_usage=max((s.stats.kv_cache_usage for s in snaps), default=0.0),
    )
