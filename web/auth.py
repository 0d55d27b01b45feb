"""Who is using the console: a Vigil user signed in with a server-side session, with the
admin API's roles and sign-in throttle.

Every console route says the least role it needs in `opt["role"]` (viewer when it says
nothing), as the admin API's routes do; `console_guard` finds the session's user, reads
the user again from the control plane (a user disabled or demoted since signing in is
so at once) and checks the role. A session also records the user's session epoch when
it signs in: once a password change, disabling the user or "sign out everywhere" has
moved the epoch on, the session is ended at its next request. A route marked
`opt["public"]` (signing in) needs no user. In open mode (a loopback host only) a
visitor without a session may read what a viewer reads; everything else needs a session.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TypeAlias

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Guard

from vigil.platform.connection import UNSAFE_METHODS, refuse_cross_site
from vigil.platform.control.access.records import Role, UserRecord
from vigil.platform.control.plane import ControlPlane
from vigil.platform.errors import NotFound, PermissionDenied, Unauthorized
from vigil.web.sessions import NEW_ID

STATE_KEY = "console_viewer"
SESSION_USER = "username"
SESSION_SINCE = "signed_in_at"
SESSION_EPOCH = "epoch"
OPERATOR = {"role": Role.OPERATOR}
ADMIN = {"role": Role.ADMIN}
PUBLIC = {"public": True}


class NotSignedIn(Unauthorized):
    """No session, or one that expired: the console answers with its sign-in page."""

    def __init__(self) -> None:
        super().__init__("Sign in to use the console.", scheme="Session", code="not_signed_in")


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who a page is drawn for: a signed-in user, or nobody (open mode, reading only)."""

    user: UserRecord | None

    @property
    def name(self) -> str | None:
        return self.user.username if self.user else None

    def may(self, role: Role) -> bool:
        return self.user is not None and self.user.may(role)

    @property
    def may_operate(self) -> bool:
        return self.may(Role.OPERATOR)

    @property
    def is_admin(self) -> bool:
        return self.may(Role.ADMIN)


def console_guard(plane: ControlPlane, open_reading: bool) -> Guard:
    async def guard(
        connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
    ) -> None:
        writing = connection.scope.get("method") in UNSAFE_METHODS
        if writing:
            refuse_cross_site(connection)
        user = await _session_user(plane, connection)
        if handler.opt.get("public"):
            connection.state[STATE_KEY] = Viewer(user)
            return
        needed = Role(handler.opt.get("role", Role.VIEWER))
        if user is None and not (open_reading and needed is Role.VIEWER and not writing):
            raise NotSignedIn()
        if user is not None and not user.may(needed):
            raise PermissionDenied(
                f"This needs the '{needed}' role (or higher); you are signed in as "
                f"'{user.username}', who has the '{user.role}' role.",
                code="insufficient_role",
            )
        connection.state[STATE_KEY] = Viewer(user)

    return guard


async def _session_user(
    plane: ControlPlane, connection: ASGIConnection[Any, Any, Any, Any]
) -> UserRecord | None:
    session = connection.scope.get("session")
    if not isinstance(session, dict) or not isinstance(session.get(SESSION_USER), str):
        return None
    username = session[SESSION_USER]
    try:
        user = await plane.users.get(username)
    except NotFound:
        user = None
    if user is None or user.disabled or not still_signed_in(session, user):
        connection.scope["session"] = {}  # ends the session: the middleware deletes it
        return None
    return user


def still_signed_in(session: dict[str, Any], user: UserRecord) -> bool:
    """Whether the session was signed in under the user's current epoch (one signed in
    before epochs were recorded holds none: it is of the first, 0)."""
    return session.get(SESSION_EPOCH, 0) == user.session_epoch


def session_for(user: UserRecord) -> dict[str, Any]:
    """What a new session holds (the backend gives it a new id)."""
    return {
        SESSION_USER: user.username,
        SESSION_SINCE: time.time(),
        SESSION_EPOCH: user.session_epoch,
        NEW_ID: True,
    }


def provide_viewer(request: Request[Any, Any, Any]) -> Viewer:
    viewer: Viewer = request.state[STATE_KEY]
    return viewer


def provide_actor(request: Request[Any, Any, Any]) -> str:
    """The signed-in user's name, for the audit log: every write needs one (the guard
    lets no one else through to a write)."""
    user = provide_viewer(request).user
    assert user is not None, "console_guard admits writes from signed-in users only"
    return user.username


Actor: TypeAlias = NamedDependency[str]
