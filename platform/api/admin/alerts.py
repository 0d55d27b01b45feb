"""`/api/admin/alerts` and `/api/admin/decisions`: the alerts Vigil raised (firing and
resolved) and every decision it took by itself, with the numbers behind each."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from litestar import Controller, get
from litestar.params import QueryParameter
from msgspec import Struct, convert

from vigil.platform.api.admin.deps import Plane
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.control.alerts.service import MAX_LIST


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

    @get("/", summary="Automatic decisions, newest first", responses=error_responses())
    async def list_decisions(
        self,
        plane: Plane,
        deployment: Annotated[str | None, QueryParameter()] = None,
        kind: Annotated[
            str | None, QueryParameter(description="shed_batch, fallback, rollback, alert")
        ] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIST)] = 100,
    ) -> list[DecisionOut]:
        kinds = (kind,) if kind else ()
        found = await plane.alerts.decisions(deployment, kinds, limit)
        return [convert(d, DecisionOut, from_attributes=True) for d in found]
