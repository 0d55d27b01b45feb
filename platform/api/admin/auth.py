"""Who may call the admin API: HTTP Basic credentials of a Vigil user, and a role.

Each route says the least role it needs in `opt["role"]` (viewer when it says
nothing); the guard authenticates, checks the role and leaves the user in the
connection's state, where `provide_actor` finds the name the audit log records.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Guard

from vigil.platform.control.access.records import Role, UserRecord
from vigil.platform.control.plane import ControlPlane
from vigil.platform.errors import PermissionDenied, Unauthorized

_STATE_KEY = "admin_user"
# A route's `opt` for the least role it needs, when that is more than viewer.
OPERATOR = {"role": Role.OPERATOR}
ADMIN = {"role": Role.ADMIN}


def basic_credentials(authorization: str | None) -> tuple[str, str] | None:
    """(username, password) from 'Basic base64(username:password)', or None."""
    if authorization is None:
        return None
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    username, colon, password = decoded.partition(":")
    return (username, password) if colon and username else None


def admin_guard(plane: ControlPlane) -> Guard:
    async def guard(
        connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
    ) -> None:
        credentials = basic_credentials(connection.headers.get("authorization"))
        if credentials is None:
            raise Unauthorized(
                "The admin API needs HTTP Basic credentials of a Vigil user "
                "('Authorization: Basic base64(username:password)'); an admin creates users "
                "with `vigil admin create --username NAME` or POST /api/admin/users.",
                code="missing_credentials",
                scheme="Basic",
            )
        user = await plane.users.authenticate(*credentials)
        if user is None:
            raise Unauthorized(
                "Wrong username or password, or the user is disabled.",
                code="invalid_credentials",
                scheme="Basic",
            )
        needed = Role(handler.opt.get("role", Role.VIEWER))
        if not user.may(needed):
            raise PermissionDenied(
                f"This needs the '{needed}' role (or higher); user '{user.username}' has "
                f"the '{user.role}' role. An admin can change it with "
                f"PATCH /api/admin/users/{user.username}.",
                code="insufficient_role",
            )
        connection.state[_STATE_KEY] = user

    return guard


def provide_actor(request: Request[Any, Any, Any]) -> str:
    """The signed-in user's name, for the audit log."""
    user: UserRecord = request.state[_STATE_KEY]
    return user.username
