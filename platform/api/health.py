"""Probes and the Prometheus scrape endpoint."""

from __future__ import annotations

from litestar import Response, get
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from vigil.platform.worker.local import LocalWorker


@get("/healthz", tags=["Operations"], summary="The process is alive")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@get("/readyz", tags=["Operations"], summary="Every configured model is loaded")
async def readyz(worker: LocalWorker) -> Response[dict[str, object]]:
    models = {name: state.value for name, state in worker.states.items()}
    if worker.ready:
        return Response({"status": "ready", "models": models})
    return Response(
        {"status": "loading", "models": models, "errors": worker.errors}, status_code=503
    )


@get("/metrics", tags=["Operations"], summary="Prometheus metrics", media_type=CONTENT_TYPE_LATEST)
async def metrics(registry: CollectorRegistry) -> Response[bytes]:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
