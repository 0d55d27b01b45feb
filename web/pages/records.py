"""The read-only records: the timeline of automatic decisions and the audit log (paged,
with the filters the admin API's lists take, each audit row a diff of the fields that
changed; without entries about users and keys unless the reader is an admin, as in
the admin API), and the workers as they last reported."""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import QueryParameter
from litestar.response import Template

from vigil.platform.control.alerts.service import DECISION_KINDS
from vigil.platform.control.audit.service import ADMIN_ONLY_ENTITIES, ENTITY_TYPES
from vigil.platform.control.listing import check_known, time_range
from vigil.platform.errors import InvalidRequest
from vigil.platform.gateway.workers import WorkerRegistry
from vigil.web.auth import Viewer
from vigil.web.deps import Plane, Workers
from vigil.web.render import is_htmx, render
from vigil.web.snapshots import changed_fields

PAGE_SIZE = 50  # rows a page shows unless `limit` says otherwise
MOST_ROWS = 200  # the most a console page shows
AUDIT_FILTERS = ("entity_type", "entity_name", "actor", "action", "since", "until", "before")
DECISION_FILTERS = ("deployment", "kind", "since", "until", "before")


def _chosen(request: Request[Any, Any, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The filters as sent, after refusing any this page does not take; empty ones are
    absent (a form sends every field)."""
    check_known(request.query_params.keys(), (*names, "limit"))
    return {n: v for n in names if (v := (request.query_params.get(n) or "").strip())}


def _before(chosen: dict[str, Any]) -> int | None:
    value = chosen.get("before")
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise InvalidRequest(f"before must be an entry id (a whole number), not {value!r}")
    return int(value)


def _page_urls(
    path: str, chosen: dict[str, Any], limit: int, next_before: int | None
) -> dict[str, Any]:
    """The links of the pager: the next (older) page, and back to the newest one."""
    query = {k: v for k, v in chosen.items() if k != "before"}
    if limit != PAGE_SIZE:
        query["limit"] = str(limit)
    older = query | {"before": str(next_before)} if next_before is not None else None
    return {
        "next_url": f"{path}?{urlencode(older)}" if older is not None else None,
        "newest_url": f"{path}?{urlencode(query)}" if "before" in chosen else None,
    }


class DecisionsController(Controller):
    path = "/decisions"

    @get("/")
    async def index(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        limit: Annotated[int, QueryParameter(ge=1, le=MOST_ROWS)] = PAGE_SIZE,
    ) -> Template:
        chosen = _chosen(request, DECISION_FILTERS)
        page = await plane.alerts.decisions_page(
            deployment=chosen.get("deployment"),
            kind=chosen.get("kind"),
            span=time_range(chosen.get("since"), chosen.get("until")),
            before_id=_before(chosen),
            limit=limit,
        )
        names = [d.name for d in await plane.deployments.list()]
        template = "decisions/_rows.html" if is_htmx(request) else "decisions/index.html"
        return render(
            request,
            template,
            area="decisions",
            decisions=page.items,
            **_page_urls("/console/decisions", chosen, limit, page.next_before),
            deployments=names,
            kinds=DECISION_KINDS,
            chosen=chosen,
        )


class AuditController(Controller):
    path = "/audit"

    @get("/")
    async def index(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        viewer: NamedDependency[Viewer],
        limit: Annotated[int, QueryParameter(ge=1, le=MOST_ROWS)] = PAGE_SIZE,
    ) -> Template:
        chosen = _chosen(request, AUDIT_FILTERS)
        hidden = frozenset() if viewer.is_admin else ADMIN_ONLY_ENTITIES
        page = await plane.audit.page(
            entity_type=chosen.get("entity_type"),
            entity_name=chosen.get("entity_name"),
            actor=chosen.get("actor"),
            action=chosen.get("action"),
            span=time_range(chosen.get("since"), chosen.get("until")),
            before_id=_before(chosen),
            limit=limit,
            hidden_types=hidden,
        )
        entries = [{"e": e, "changes": changed_fields(e.before, e.after)} for e in page.items]
        template = "audit/_rows.html" if is_htmx(request) else "audit/index.html"
        return render(
            request,
            template,
            area="audit",
            entries=entries,
            **_page_urls("/console/audit", chosen, limit, page.next_before),
            types=[t for t in sorted(ENTITY_TYPES) if t not in hidden],
            chosen=chosen,
        )


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
