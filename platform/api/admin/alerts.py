"""`/api/admin/alerts` and `/api/admin/decisions`: the alerts Vigil raised (firing and
resolved) and every decision it took by itself, with the numbers behind each."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from litestar import Controller, Request, Response, get
from litestar.params import QueryParameter
from msgspec import Struct, convert

from vigil.platform.api.admin.deps import Plane
from vigil.platform.api.admin.paging import next_link
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.control.alerts.service import DECISION_KINDS, MAX_LIST
from vigil.platform.control.listing import check_known, time_range

DECISION_FILTERS = ("deployment", "kind", "since", "until", "before", "limit")


class AlertOut(Struct, kw_only=True):
    fingerprint: str
    deployment: str
    sli: str
    severity: str
    state: str
    starts_at: datetime
    ends_at: datetime | None
    summary: str
    details: dict[str, Any]


class DecisionOut(Struct, kw_only=True):
    id: int
    at: datetime
    deployment: str
    kind: str
    decision: str
    reason: str
    details: dict[str, Any]


class AlertController(Controller):
    path = "/alerts"

    @get("/", summary="Alerts, newest first", responses=error_responses())
    async def list_alerts(
        self,
        plane: Plane,
        alert_state: Annotated[
            Literal["firing", "resolved"] | None, QueryParameter(name="state")
        ] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIST)] = 100,
    ) -> list[AlertOut]:
        alerts = await plane.alerts.recent(alert_state, limit)
        return [convert(a, AlertOut, from_attributes=True) for a in alerts]


class DecisionController(Controller):
    path = "/decisions"

    @get(
        "/",
        summary="Automatic decisions, newest first; a Link rel=next header names the next page",
        responses=error_responses(400),
    )
    async def list_decisions(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        deployment: Annotated[str | None, QueryParameter()] = None,
        kind: Annotated[str | None, QueryParameter(description=", ".join(DECISION_KINDS))] = None,
        since: Annotated[str | None, QueryParameter(description="ISO 8601, inclusive")] = None,
        until: Annotated[str | None, QueryParameter(description="ISO 8601, exclusive")] = None,
        before: Annotated[
            int | None, QueryParameter(ge=1, description="decisions older than this id")
        ] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIST)] = 100,
    ) -> Response[list[DecisionOut]]:
        check_known(request.query_params.keys(), DECISION_FILTERS)
        page = await plane.alerts.decisions_page(
            deployment=deployment,
            kind=kind,
            span=time_range(since, until),
            before_id=before,
            limit=limit,
        )
        body = [convert(d, DecisionOut, from_attributes=True) for d in page.items]
        return Response(body, headers=next_link(request, page.next_before))
