"""`/api/admin/audit` and `/api/admin/replicas`: what happened and what is running
(read only)."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get
from litestar.params import QueryParameter

from vigil.platform.api.admin.deps import Plane
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.api.admin.schemas import AuditOut, ReplicaOut
from vigil.platform.api.admin.views import audit_out, replica_out
from vigil.platform.control.audit.service import MAX_LIMIT


class AuditController(Controller):
    path = "/audit"

    @get("/", summary="The audit log, newest first", responses=error_responses(400))
    async def list_audit(
        self,
        plane: Plane,
        entity_type: Annotated[
            str | None, QueryParameter(description="deployment, version, model, webhook, user, key")
        ] = None,
        entity_name: Annotated[
            str | None, QueryParameter(description="e.g. a deployment's name, or model@version")
        ] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT)] = 100,
    ) -> list[AuditOut]:
        entries = await plane.audit.list(entity_type, entity_name, limit)
        return [audit_out(e) for e in entries]


class ReplicaController(Controller):
    path = "/replicas"

    @get("/", summary="The engine workers, as each last reported", responses=error_responses())
    async def list_replicas(self, plane: Plane) -> list[ReplicaOut]:
        return [replica_out(r) for r in await plane.replicas.list()]
