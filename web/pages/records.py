"""The read-only records: the timeline of automatic decisions, the audit log (with
filters, and without entries about users and keys unless the reader is an admin, as
in the admin API), and the workers as they last reported."""

from __future__ import annotations

import time
from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import FromQuery, QueryParameter
from litestar.response import Template

from vigil.platform.control.alerts.service import MAX_LIST
from vigil.platform.control.audit.service import ADMIN_ONLY_ENTITIES, MAX_LIMIT
from vigil.platform.gateway.workers import WorkerRegistry
from vigil.web.auth import Viewer
from vigil.web.deps import Plane, Workers
from vigil.web.render import is_htmx, render

DECISION_KINDS = ("shed_batch", "fallback", "rollback", "alert")
AUDIT_TYPES = ("deployment", "version", "model", "webhook", "user", "key")


class DecisionsController(Controller):
    path = "/decisions"

    @get("/")
    async def index(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        deployment: FromQuery[str | None] = None,
        kind: FromQuery[str | None] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIST)] = 100,
    ) -> Template:
        found = await plane.alerts.decisions(deployment or None, (kind,) if kind else (), limit)
        names = [d.name for d in await plane.deployments.list()]
        template = "decisions/_rows.html" if is_htmx(request) else "decisions/index.html"
        return render(
            request,
            template,
            area="decisions",
            decisions=found,
            deployments=names,
            kinds=DECISION_KINDS,
            chosen={"deployment": deployment or "", "kind": kind or ""},
        )


class AuditController(Controller):
    path = "/audit"

    @get("/")
    async def index(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        viewer: NamedDependency[Viewer],
        entity_type: FromQuery[str | None] = None,
        entity_name: FromQuery[str | None] = None,
        by: Annotated[str | None, QueryParameter(name="actor")] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT)] = 100,
    ) -> Template:
        hidden = frozenset() if viewer.is_admin else ADMIN_ONLY_ENTITIES
        entries = await plane.audit.list(
            entity_type or None, entity_name or None, limit, hidden, by or None
        )
        template = "audit/_rows.html" if is_htmx(request) else "audit/index.html"
        types = [t for t in AUDIT_TYPES if t not in hidden]
        chosen = {
            "entity_type": entity_type or "",
            "entity_name": entity_name or "",
            "actor": by or "",
        }
        return render(request, template, area="audit", entries=entries, types=types, chosen=chosen)


class WorkersController(Controller):
    path = "/workers"

    @get("/")
    async def index(self, request: Request[Any, Any, Any], workers: Workers) -> Template:
        template = "workers/_table.html" if is_htmx(request) else "workers/index.html"
        return render(request, template, area="workers", workers=_workers(workers))


def _workers(registry: WorkerRegistry) -> list[dict[str, Any]]:
    """This gateway's view of each worker: heartbeat age, and per loaded version its
    queue, KV use and measured step costs."""
    now = time.monotonic()
    rows = []
    for replica in sorted(registry.replicas.values(), key=lambda r: r.id):
        slots = []
        for key, slot in sorted(replica.slots.items()):
            stats = slot.stats.stats() if slot.stats is not None else None
            slots.append(
                {
                    "key": key,
                    "state": slot.state,
                    "progress": slot.progress,
                    "waiting": stats.num_waiting if stats else None,
                    "running": stats.num_running if stats else None,
                    "kv": stats.kv_cache_usage if stats else None,
                    "costs": slot.costs.costs() if slot.costs is not None else None,
                }
            )
        rows.append(
            {
                "id": replica.id,
                "address": replica.address,
                "device": replica.device,
                "up": replica.up(now),
                "heartbeat_age_s": now - replica.last_heartbeat_ts,
                "slots": slots,
            }
        )
    return rows
