"""`/api/admin/slo`: how each deployment is doing against its SLO, now: per SLI its error
budget left, burn rate over each alert window and the alert the burn calls for, and the
good/total counts of each model version (a canary beside its stable version)."""

from __future__ import annotations

from litestar import Controller, get
from litestar.params import FromPath
from msgspec import Struct

from vigil.platform.api.admin.deps import SLOs
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.errors import NotFound
from vigil.platform.slo.tracker import DeploymentSLO


class Counts(Struct, kw_only=True):
    good: int
    total: int


class SLIOut(Struct, kw_only=True):
    objective: float
    good: int
    total: int
    budget_remaining: float
    # window by its real length ("1h", "5m"; "5s" in a 1-hour SLO window) -> rate;
    # null: no requests there
    burn_rates: dict[str, float | None]
    alert: str | None  # page, ticket, or null
    rule: str | None  # the alert rule's long window, by its real length, e.g. "1h"


class SLOStatusOut(Struct, kw_only=True):
    deployment: str
    window_s: float
    slis: dict[str, SLIOut]
    versions: dict[str, dict[str, Counts]]  # model@version -> SLI -> counts


def status_out(s: DeploymentSLO) -> SLOStatusOut:
    return SLOStatusOut(
        deployment=s.deployment,
        window_s=s.slo.window_s,
        slis={
            sli.value: SLIOut(
                objective=v.objective,
                good=v.good,
                total=v.total,
                budget_remaining=v.budget_remaining,
                burn_rates=v.burn_rates,
                alert=v.severity.value if v.severity else None,
                rule=v.rule.name if v.rule else None,
            )
            for sli, v in s.slis.items()
        },
        versions={
            version: {sli.value: Counts(good=g, total=t) for sli, (g, t) in counts.items()}
            for version, counts in s.versions.items()
        },
    )


class SLOController(Controller):
    path = "/slo"

    @get("/", summary="Every deployment against its SLO", responses=error_responses())
    async def list_status(self, slos: SLOs) -> list[SLOStatusOut]:
        return [status_out(s) for n in slos.deployments() if (s := slos.status(n))]

    @get("/{name:str}", summary="A deployment against its SLO", responses=error_responses(404))
    async def get_status(self, slos: SLOs, name: FromPath[str]) -> SLOStatusOut:
        status = slos.status(name)
        if status is None:
            raise NotFound(
                f"no deployment is named {name!r}; GET /api/admin/slo lists them",
                param="name",
                code="not_found",
            )
        return status_out(status)
