"""SLOs: each deployment's targets (edited in place), and how it does against them now:
per SLI the compliance, error budget left, burn rate per window and the alert the burn
calls for (the admin API's /api/admin/slo numbers), with the alerts firing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath
from litestar.response import Template

from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.specs import SLOTargets
from vigil.platform.slo.tracker import SLIStatus, SLOTracker
from vigil.web.auth import OPERATOR, Actor
from vigil.web.deps import Plane, SLOs
from vigil.web.forms import checked, decimal, form_of, whole
from vigil.web.render import render


@dataclass(frozen=True, slots=True)
class BudgetView:
    """An error budget as a person reads it: a share from 0 to 100%, or since when it
    has been spent, and in words what the number counts."""

    text: str
    explained: str
    exhausted: bool


def budget_view(s: SLIStatus, window_s: float, now: datetime) -> BudgetView:
    window = duration(window_s)
    if s.total == 0:
        return BudgetView("100%", f"no requests in the last {window}: nothing spent", False)
    allowed = s.total * (1.0 - s.objective)
    bad = s.total - s.good
    spent = (
        f"{bad} bad of {s.total} requests in the last {window}; the objective allows {allowed:.1f}"
    )
    if s.overspent is None:
        return BudgetView(f"{100 * s.budget_left:.1f}%", spent, False)
    if s.exhausted_for_s is not None:
        since = (now - timedelta(seconds=s.exhausted_for_s)).strftime("%H:%M:%S UTC")
        text = f"exhausted since {since}"
    else:
        text = "exhausted"
    return BudgetView(text, f"{spent} ({s.overspent:.1f}x the budget)", True)


def duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


async def _card(plane: ControlPlane, slos: SLOTracker, name: str) -> dict[str, Any]:
    status = slos.status(name)
    now = datetime.now(UTC)
    budgets = (
        {sli: budget_view(s, status.slo.window_s, now) for sli, s in status.slis.items()}
        if status is not None
        else {}
    )
    return {
        "name": name,
        "slo": await plane.deployments.get_slo(name),
        "status": status,
        "budgets": budgets,
    }


def _targets(form: Any) -> SLOTargets:
    def number(name: str, low: float, high: float | None = None) -> float:
        value = decimal(form, name, low=low, high=high)
        assert value is not None
        return value

    min_requests = whole(form, "rollback_min_requests", low=1)
    assert min_requests is not None
    return SLOTargets(
        ttft_p99_s=number("ttft_p99_s", 0.001),
        min_tokens_per_s=number("min_tokens_per_s", 0),
        batch_shed_fraction=number("batch_shed_fraction", 0, 1),
        availability_target=number("availability_target", 0, 1),
        window_s=number("window_s", 1),
        auto_rollback=checked(form, "auto_rollback"),
        rollback_min_requests=min_requests,
        rollback_margin=number("rollback_margin", 0, 1),
        admission_target=number("admission_target", 0, 1),
    )


class SLOsController(Controller):
    path = "/slos"

    @get("/")
    async def index(self, request: Request[Any, Any, Any], plane: Plane, slos: SLOs) -> Template:
        names = [d.name for d in await plane.deployments.list()]
        cards = [await _card(plane, slos, n) for n in names]
        firing = await plane.alerts.recent("firing", 100)
        return render(request, "slos/index.html", area="slos", cards=cards, firing=firing)

    @get("/{name:str}")
    async def card(
        self, request: Request[Any, Any, Any], plane: Plane, slos: SLOs, name: FromPath[str]
    ) -> Template:
        return render(request, "slos/_card.html", **await _card(plane, slos, name))

    @post("/{name:str}", opt=OPERATOR)
    async def save(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        slos: SLOs,
        actor: Actor,
        name: FromPath[str],
    ) -> Template:
        targets = _targets(await form_of(request))
        await plane.deployments.set_slo(name, targets, actor=actor)
        return render(
            request,
            "slos/_card.html",
            flash_message=f"Saved the SLO of {name}.",
            flash_kind="ok",
            **await _card(plane, slos, name),
        )
