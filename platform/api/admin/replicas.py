"""`/api/admin/replicas`: the engine workers, as each last reported (read only)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from litestar import Controller, get
from msgspec import Struct, convert

from vigil.platform.api.admin.deps import Plane
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.control.replicas.records import ReplicaStatus


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


class ReplicaController(Controller):
    path = "/replicas"

    @get("/", summary="The engine workers, as each last reported", responses=error_responses())
    async def list_replicas(self, plane: Plane) -> list[ReplicaOut]:
        return [convert(r, ReplicaOut, from_attributes=True) for r in await plane.replicas.list()]
