"""`/api/admin/replicas`: the engine workers, as each last reported (read only), and the
same workers as Prometheus scrape targets."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from litestar import Controller, get
from msgspec import Struct, convert

from vigil.platform.api.admin.deps import Plane
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.control.replicas.records import ReplicaRecord, ReplicaStatus


class ReplicaOut(Struct, kw_only=True):
    id: str
    address: str
    device: str
    memory_bytes: int
    status: ReplicaStatus
    versions: list[str]
    stats: dict[str, Any]
    registered_at: datetime
    last_heartbeat_at: datetime


class ScrapeTargetsOut(Struct, kw_only=True):
    """One entry of Prometheus's HTTP service discovery format."""

    targets: list[str]
    labels: dict[str, str]


class ReplicaController(Controller):
    path = "/replicas"

    @get("/", summary="The engine workers, as each last reported", responses=error_responses())
    async def list_replicas(self, plane: Plane) -> list[ReplicaOut]:
        return [convert(r, ReplicaOut, from_attributes=True) for r in await plane.replicas.list()]

    @get(
        "/scrape-targets",
        summary="The workers not down, in Prometheus's HTTP service discovery format",
        description="Each worker's own /metrics has the engine-step histograms "
        "(vigil_engine_step_seconds, vigil_batch_size, vigil_batch_wait_seconds) that the "
        "gateway cannot see; point an `http_sd_configs` entry here (ops/prometheus).",
        responses=error_responses(),
    )
    async def scrape_targets(self, plane: Plane) -> list[ScrapeTargetsOut]:
        return [
            scrape_target(r) for r in await plane.replicas.list() if r.status != ReplicaStatus.DOWN
        ]


def scrape_target(replica: ReplicaRecord) -> ScrapeTargetsOut:
    """`host:port` from the address the worker advertised (`http://host:port`)."""
    raw = replica.address
    address = urlsplit(raw if "://" in raw else f"http://{raw}")
    labels = {"replica": replica.id}
    if address.scheme == "https":
        labels["__scheme__"] = "https"
    return ScrapeTargetsOut(targets=[address.netloc], labels=labels)
