"""`/api/admin/audit`: what happened, newest first (read only), filtered and paged as
the console's audit page is (control/listing.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from litestar import Controller, Request, Response, get
from litestar.params import QueryParameter
from msgspec import Struct, convert

from vigil.platform.api.admin.deps import Plane, User
from vigil.platform.api.admin.paging import next_link
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.control.access.records import Role
from vigil.platform.control.audit.service import ADMIN_ONLY_ENTITIES, ENTITY_TYPES, MAX_LIMIT
from vigil.platform.control.listing import check_known, time_range

AUDIT_FILTERS = (
    "entity_type",
    "entity_name",
    "actor",
    "action",
    "since",
    "until",
    "before",
    "limit",
)


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

    @get(
        "/",
        summary="The audit log, newest first; a Link rel=next header names the next page",
        responses=error_responses(400),
    )
    async def list_audit(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        user: User,
        entity_type: Annotated[
            str | None, QueryParameter(description=", ".join(sorted(ENTITY_TYPES)))
        ] = None,
        entity_name: Annotated[
            str | None, QueryParameter(description="e.g. a deployment's name, or model@version")
        ] = None,
        # `actor` names the caller's dependency: the query parameter is read as `by`
        by: Annotated[
            str | None, QueryParameter(name="actor", description="a username, or system")
        ] = None,
        action: Annotated[str | None, QueryParameter(description="e.g. deployment.promote")] = None,
        since: Annotated[str | None, QueryParameter(description="ISO 8601, inclusive")] = None,
        until: Annotated[str | None, QueryParameter(description="ISO 8601, exclusive")] = None,
        before: Annotated[
            int | None, QueryParameter(ge=1, description="entries older than this id")
        ] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT)] = 100,
    ) -> Response[list[AuditOut]]:
        """Users and API keys are an admin's to read, so are the entries about them."""
        check_known(request.query_params.keys(), AUDIT_FILTERS)
        hidden = frozenset() if user.may(Role.ADMIN) else ADMIN_ONLY_ENTITIES
        page = await plane.audit.page(
            entity_type=entity_type,
            entity_name=entity_name,
            actor=by,
            action=action,
            span=time_range(since, until),
            before_id=before,
            limit=limit,
            hidden_types=hidden,
        )
        body = [convert(e, AuditOut, from_attributes=True) for e in page.items]
        return Response(body, headers=next_link(request, page.next_before))
