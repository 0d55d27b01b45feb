"""Probes and the Prometheus scrape endpoint."""

from __future__ import annotations

from typing import Literal

from litestar import Response, get
from litestar.openapi import ResponseSpec
from msgspec import Struct
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from vigil.platform.gateway.models import ModelDirectory


class Liveness(Struct):
    status: Literal["ok"]


class Readiness(Struct, omit_defaults=True):
    status: Literal["ready", "loading"]
    versions: dict[str, str]  # model@version -> loading, ready or failed
    errors: dict[str, str] | None = None  # model@version -> why it failed to load
    progress: dict[str, float] | None = None  # model@version -> 0-1, while loading


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
            description="A deployment's serving version is still loading or failed to load.",
            generate_examples=False,
        )
    },
)
async def readyz(models: ModelDirectory) -> Response[Readiness]:
    """Ready while every deployment can serve; versions rolling out (a canary, a new
    stable) are listed with their load progress or error without changing that."""
    versions = models.version_states()
    progress = {key: round(p, 3) for key, p in models.version_progress(versions).items()}
    errors = {
        key: error for key in versions for error in [models.version_error(key)] if error is not None
    }
    ready = models.serving_ready(versions)
    body = Readiness("ready" if ready else "loading", versions, errors or None, progress or None)
    return Response(body, status_code=200 if ready else 503)


@get("/metrics", tags=["Operations"], summary="Prometheus metrics", media_type=CONTENT_TYPE_LATEST)
async def metrics(registry: CollectorRegistry) -> Response[bytes]:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
