"""The admin REST API (`/api/admin/...`) over the control plane. Each control-plane
domain has one module here (versions, deployments, access, audit, webhooks, replicas)
with its controller(s), its wire bodies and the mapping between them and the domain's
records; auth.py, deps.py, bodies.py and responses.py are what they share.

Mount it with `admin_router(plane, throttle, slos)` in the application's route handlers, with the
exception handlers of `vigil.platform.wire.errors`, and add `ADMIN_OPENAPI_COMPONENTS` to the
OpenAPI config's components so that the schema defines the Basic security scheme its
operations refer to:

    Litestar(
        route_handlers=[..., admin_router(plane, SignInThrottle(), SLOTracker())],
        exception_handlers=EXCEPTION_HANDLERS,
        openapi_config=OpenAPIConfig(..., components=[ADMIN_OPENAPI_COMPONENTS]),
    )
"""

from __future__ import annotations

from litestar import Router
from litestar.di import Provide
from litestar.openapi.spec import Components, SecurityScheme

from vigil.platform.api.admin.access import KeyController, UserController
from vigil.platform.api.admin.alerts import AlertController, DecisionController
from vigil.platform.api.admin.audit import AuditController
from vigil.platform.api.admin.auth import (
    admin_guard,
    provide_actor,
    provide_user,
    same_site_only,
)
from vigil.platform.api.admin.deployments import DeploymentController
from vigil.platform.api.admin.plan import PlanController
from vigil.platform.api.admin.replicas import ReplicaController
from vigil.platform.api.admin.slo import SLOController
from vigil.platform.api.admin.traces import TraceController
from vigil.platform.api.admin.versions import ModelController
from vigil.platform.api.admin.webhooks import WebhookController
from vigil.platform.control.plane import ControlPlane
from vigil.platform.gateway.throttle import SignInThrottle
from vigil.platform.planning.service import PlanService
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.telemetry.tracing import TraceRing

SECURITY_SCHEME = "vigilBasic"
ADMIN_OPENAPI_COMPONENTS = Components(
    security_schemes={
        SECURITY_SCHEME: SecurityScheme(
            type="http",
            scheme="basic",
            description="A Vigil user's username and password (`vigil admin create`).",
        )
    }
)


def admin_router(
    plane: ControlPlane,
    throttle: SignInThrottle,
    slos: SLOTracker,
    traces: TraceRing | None = None,
    planner: PlanService | None = None,
) -> Router:
    """`traces`: the ring of kept traces; None when tracing is off. `planner`: plans over
    the gateway's deployments and workers; None answers 503 at /plan."""

    def provide_plane() -> ControlPlane:
        return plane

    def provide_slos() -> SLOTracker:
        return slos

    def provide_traces() -> TraceRing | None:
        return traces

    def provide_planner() -> PlanService | None:
        return planner

    return Router(
        path="/api/admin",
        route_handlers=[
            ModelController,
            DeploymentController,
            WebhookController,
            KeyController,
            UserController,
            AuditController,
            ReplicaController,
            SLOController,
            AlertController,
            DecisionController,
            TraceController,
            PlanController,
        ],
        dependencies={
            "plane": Provide(provide_plane, sync_to_thread=False),
            "slos": Provide(provide_slos, sync_to_thread=False),
            "traces": Provide(provide_traces, sync_to_thread=False),
            "planner": Provide(provide_planner, sync_to_thread=False),
            "actor": Provide(provide_actor, sync_to_thread=False),
            "user": Provide(provide_user, sync_to_thread=False),
        },
        guards=[same_site_only, admin_guard(plane, throttle)],
        tags=["Admin"],
        security=[{SECURITY_SCHEME: []}],
    )


__all__ = ["ADMIN_OPENAPI_COMPONENTS", "admin_router"]
