"""The long-lived parts of a running gateway, built once from the settings."""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry, Gauge
from sqlalchemy.ext.asyncio import AsyncEngine

from vigil.platform.alerts.connect import webhook_client
from vigil.platform.alerts.delivery import WebhookDelivery
from vigil.platform.alerts.links import public_base_url
from vigil.platform.control.changes import ChangeFeed
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.ownership import LoopOwnership
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.specs import DeploymentSpec
from vigil.platform.control.webhooks.addresses import WebhookAddressPolicy
from vigil.platform.gateway.auth import Authenticator, AuthMode
from vigil.platform.gateway.embeddings import EmbeddingService
from vigil.platform.gateway.fleet import FleetBook, engine_snapshots
from vigil.platform.gateway.lease import LoadBook
from vigil.platform.gateway.link import HttpWorkerLink, WorkerLink
from vigil.platform.gateway.pipeline import GenerationService
from vigil.platform.gateway.rate_limits import KeyRateLimits
from vigil.platform.gateway.router import Router
from vigil.platform.gateway.serving import ServingView
from vigil.platform.gateway.serving_sync import ServingSync
from vigil.platform.gateway.shadow import ShadowMirror
from vigil.platform.gateway.shared_counts import SharedCounts
from vigil.platform.gateway.throttle import SignInThrottle
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.gateway.workers import WorkerRegistry
from vigil.platform.loops import BackgroundLoops
from vigil.platform.planning.measured import recovery
from vigil.platform.settings import ServeSettings
from vigil.platform.slo.actions import ActionBoard, Recovery
from vigil.platform.slo.loop import SLOLoop
from vigil.platform.slo.metrics import AlertsCollector, SLOCollector
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.telemetry.deployments import DeploymentSeries
from vigil.platform.telemetry.live import LiveSeries
from vigil.platform.telemetry.metrics import (
    EngineStatsCollector,
    Metrics,
    RedisCollector,
    WorkerCollector,
)
from vigil.platform.telemetry.recorder import RequestRecorder
from vigil.platform.telemetry.sampling import LiveSampler
from vigil.platform.telemetry.series_file import FILE_NAME as SERIES_FILE
from vigil.platform.telemetry.series_file import SeriesFile
from vigil.platform.telemetry.tracing import Tracing, build_tracing


@dataclass(slots=True)
class Services:
    """A container of parts, each holding its own rules: the serving view's sync with
    the control plane (gateway/serving_sync.py), the fleet's book (gateway/fleet.py),
    the background loops (loops.py) and telemetry's sampler (telemetry/sampling.py)."""

    settings: ServeSettings
    # Serving: the workers, what they run, and each request's way through.
    workers: WorkerRegistry
    fleet: FleetBook  # what the workers report, kept in the control plane
    view: ServingView
    serving: ServingSync  # the view kept to what the control plane says
    tokenizers: TokenizerCache
    loads: LoadBook
    generation: GenerationService
    embedding: EmbeddingService
    auth: Authenticator
    worker_token: str
    http: httpx.AsyncClient  # to the workers
    # The control plane, and who may use the console.
    db: AsyncEngine
    plane: ControlPlane
    sign_ins: SignInThrottle
    console_secret: str  # signs the console's CSRF tokens
    # Telemetry and the SLOs.
    registry: CollectorRegistry
    live: LiveSeries
    series: DeploymentSeries  # the console's live charts, per deployment
    slos: SLOTracker
    tracing: Tracing | None  # None: tracing off
    loops: BackgroundLoops
    draining: bool = False  # SIGTERM: /readyz fails while running requests finish


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
    ownership = LoopOwnership(settings.resolved_database_url)
    Gauge(
        "vigil_loop_owner",
        "1 while this gateway runs the SLO loop and webhook delivery (one gateway does)",
        registry=registry,
    ).set_function(lambda: float(ownership.is_owner))
    auth = Authenticator(plane.keys, AuthMode(settings.auth), KeyRateLimits(counts))
    serving = ServingSync(plane, view, tokenizers, slos, generation.offered, auth)
    delivery = WebhookDelivery(
        plane.outbox,
        webhook_client(webhook_policy),
        settings.webhook_max_age_s,
        wake=plane.outbox_written,
        attempt_timeout_s=settings.webhook_timeout_s,
        base_url=public_base_url(settings.external_url, settings.host, settings.port),
    )
    sampler = LiveSampler(
        lambda: engine_snapshots(workers),
        lambda: view.deployments.values(),
        actions.get,
        live,
        series,
    )
    loops = BackgroundLoops(
        sampler,
        serving,
        plane,
        ownership,
        slo_loop,
        delivery,
        ChangeFeed(db),
        SeriesFile(settings.data_dir / SERIES_FILE, series),
    )
    return Services(
        settings=settings,
        workers=workers,
        fleet=FleetBook(workers, view, tokenizers, plane),
        view=view,
        serving=serving,
        tokenizers=tokenizers,
        loads=loads,
        generation=generation,
        embedding=EmbeddingService(
            view,
            tokenizers,
            link,
            generation.placer,
            recorder,
            settings.max_prompt_chars,
            actions,
        ),
        auth=auth,
        worker_token=worker_token,
        http=http,
        db=db,
        plane=plane,
        sign_ins=sign_ins,
        console_secret=settings.console_secret
        or read_or_make_secret(settings.data_dir / "console-secret"),
        registry=registry,
        live=live,
        series=series,
        slos=slos,
        tracing=build_tracing(settings.tracing, "vigil-gateway", metrics),
        loops=loops,
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
