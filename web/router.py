"""The console under /console/: its pages, each behind a signed-in session (or, in open
mode on a loopback host, readable without one), CSRF on every write, and its own error
answers.

Mount `console_router(services)` in the application and add `console_stores(services)`
to its stores: the sessions live in the control-plane database.
"""

from __future__ import annotations

from litestar import Router
from litestar.config.csrf import CSRFConfig
from litestar.middleware.base import DefineMiddleware
from litestar.middleware.csrf import CSRFMiddleware
from litestar.stores.base import Store

from vigil.platform.services import Services
from vigil.web.auth import console_guard
from vigil.web.deps import console_dependencies
from vigil.web.errors import EXCEPTION_HANDLERS
from vigil.web.pages.alerts import AlertsController
from vigil.web.pages.deployments import DeploymentsController
from vigil.web.pages.keys import KeysController
from vigil.web.pages.overview import ConsoleController
from vigil.web.pages.records import AuditController, DecisionsController, WorkersController
from vigil.web.pages.signin import SignInController
from vigil.web.pages.slos import SLOsController
from vigil.web.pages.traces import TracesController
from vigil.web.pages.versions import VersionsController
from vigil.web.sessions import STORE_NAME, DatabaseStore, session_config

CSRF_COOKIE = "vigil_csrf"
CSRF_HEADER = "x-csrftoken"


def console_router(services: Services) -> Router:
    settings = services.settings
    csrf = CSRFConfig(
        secret=services.console_secret,
        cookie_name=CSRF_COOKIE,
        cookie_path="/console",
        header_name=CSRF_HEADER,
        cookie_samesite="strict",
        cookie_httponly=True,  # pages carry the token themselves; no script reads the cookie
    )
    return Router(
        path="/console",
        route_handlers=[
            SignInController,
            ConsoleController,
            DeploymentsController,
            VersionsController,
            SLOsController,
            AlertsController,
            DecisionsController,
            AuditController,
            KeysController,
            WorkersController,
            TracesController,
        ],
        guards=[console_guard(services.plane, open_reading=settings.auth == "open")],
        # Outermost first: the session is loaded before the CSRF check, so that a refused
        # write still leaves the session as it was.
        middleware=[
            session_config(settings.console_session_s).middleware,
            DefineMiddleware(CSRFMiddleware, config=csrf),
        ],
        dependencies=console_dependencies(services),
        exception_handlers=EXCEPTION_HANDLERS,
        include_in_schema=False,
    )


def console_stores(services: Services) -> dict[str, Store]:
    return {STORE_NAME: DatabaseStore(services.plane.sessions)}
