"""`/api/admin/audit`: what happened, newest first (read only)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from litestar import Controller, get
from litestar.params import QueryParameter
from msgspec import Struct, convert

from vigil.platform.api.admin.deps import Plane, User
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.control.access.records import Role
from vigil.platform.control.audit.service import ADMIN_ONLY_ENTITIES, MAX_LIMIT


class AuditOut(Struct, kw_only=True):
    id: int
    at: datetime
    actor: str
    action: str
    entity_type: str
    entity_name: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class AuditController(Controller):
    path = "/audit"

    @get("/", summary="The audit log, newest first", responses=error_responses(400))
    async def list_audit(
        self,
        plane: Plane,
        user: User,
        entity_type: Annotated[
            str | None, QueryParameter(description="deployment, version, model, webhook, user, key")
        ] = None,
        entity_name: Annotated[
            str | None, QueryParameter(description="e.g. a deployment's name, or model@version")
        ] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT)] = 100,
    ) -> list[AuditOut]:
        """Users and API keys are an admin's to read, so are the entries about them."""
        hidden = frozenset() if user.may(Role.ADMIN) else ADMIN_ONLY_ENTITIES
        entries = await plane.audit.list(entity_type, entity_name, limit, hidden)
        return [convert(e, AuditOut, from_attributes=True) for e in entries]
