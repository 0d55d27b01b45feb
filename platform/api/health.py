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


@get("/healthz", tags=["Operations"], summary="The process is alive")
async def healthz() -> Liveness:
    return Liveness("ok")


@get(
    "/readyz",
    tags=["Operations"],
    summary="Every model version in use is loaded",
    responses={
        503: ResponseSpec(
            Readiness,
            description="A model is still loading or failed to load.",
            generate_examples=False,
        )
    },
)
async def readyz(models: ModelDirectory) -> Response[Readiness]:
    versions = models.version_states()
    if versions and all(state == "ready" for state in versions.values()):
        return Response(Readiness("ready", versions))
    errors = {
        key: error for key in versions for error in [models.version_error(key)] if error is not None
    }
    return Response(Readiness("loading", versions, errors or None), status_code=503)


@get("/metrics", tags=["Operations"], summary="Prometheus metrics", media_type=CONTENT_TYPE_LATEST)
async def metrics(registry: CollectorRegistry) -> Response[bytes]:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
