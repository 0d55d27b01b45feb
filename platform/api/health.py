"""Probes and the Prometheus scrape endpoint."""

from __future__ import annotations

from typing import Any, Literal

from litestar import Request, Response, get
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from msgspec import Struct
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from vigil.platform.gateway.readiness import (
    serving_ready,
    version_progress,
    version_states,
)
from vigil.platform.gateway.serving import ServingView
from vigil.platform.gateway.shared_counts import SharedCounts
from vigil.platform.gateway.tokenizers import TokenizerCache


class Liveness(Struct):
    status: Literal["ok"]


Status = Literal["ready", "degraded", "loading", "draining"]


class Readiness(Struct, omit_defaults=True):
    status: Status
    versions: dict[str, str]  # model@version -> loading, ready or failed
    progress: dict[str, float] | None = None  # model@version -> 0-1, while loading
    redis: Literal["up", "unreachable"] | None = None  # with --redis-url


@get("/healthz", tags=["Operations"], summary="The process is alive")
async def healthz() -> Liveness:
    return Liveness("ok")


@get(
    "/readyz",
    tags=["Operations"],
    summary="Every deployment's serving version is loaded",
    responses={
        503: ResponseSpec(
            Readiness,
            description="A deployment's serving version is still loading or failed to load, "
            "or the gateway is draining before it stops (SIGTERM). Redis unreachable is "
            "200 with status 'degraded': the gateway still serves, counting limits itself.",
            generate_examples=False,
        )
    },
)
async def readyz(
    view: NamedDependency[ServingView],
    tokenizers: NamedDependency[TokenizerCache],
    counts: NamedDependency[SharedCounts],
    draining: NamedDependency[bool],
) -> Response[Readiness]:
    """Ready while every deployment can serve; versions rolling out (a canary, a new
    stable) are listed with their state and load progress without changing that. Why a
    version failed (it may name files on the host) is for operators: the admin API's
    version records hold it. Redis away leaves it ready ('degraded'): taking every
    gateway out of service for it would turn a lost cache of counts into an outage."""
    states = version_states(view, tokenizers)
    progress = {key: round(p, 3) for key, p in version_progress(view, states).items()}
    ready = serving_ready(view, states)
    versions = {key: state.value for key, state in states.items()}
    redis_up = await counts.probe()
    status: Status = "ready" if ready else "loading"
    if ready and redis_up is False:
        status = "degraded"
    if draining:  # stopping: send new requests elsewhere
        status, ready = "draining", False
    redis: Literal["up", "unreachable"] | None = None
    if redis_up is not None:
        redis = "up" if redis_up else "unreachable"
    body = Readiness(status, versions, progress or None, redis)
    return Response(body, status_code=200 if ready else 503)


@get(
    "/metrics",
    tags=["Operations"],
    summary="Prometheus metrics",
    description="Prometheus's text format; OpenMetrics (with the trace ids of sampled "
    "requests as exemplars on the latency histograms) when the Accept header asks for "
    "application/openmetrics-text.",
    media_type=CONTENT_TYPE_LATEST,
)
async def metrics(
    request: Request[Any, Any, Any], registry: NamedDependency[CollectorRegistry]
) -> Response[bytes]:
    if "application/openmetrics-text" in request.headers.get("accept", ""):
        return Response(
            openmetrics.generate_latest(registry), media_type=openmetrics.CONTENT_TYPE_LATEST
        )
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
