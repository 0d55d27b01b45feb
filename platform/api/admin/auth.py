"""Who may call the admin API: HTTP Basic credentials of a Vigil user, and a role.

Each route says the least role it needs in `opt["role"]` (viewer when it says
nothing); the guard authenticates, checks the role and leaves the user in the
connection's state, where `provide_actor` finds the name the audit log records.

Browsers send Basic credentials by themselves once a user has typed them, so a page on
another site could make an admin's browser send a write. `same_site_only` refuses
writes a browser marks as coming from another site (platform/connection.py) and bodies
that are not `application/json`, which no cross-site form or simple request can send.
Scripts and CLIs, which send neither header, are unaffected.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Guard

from vigil.platform.connection import UNSAFE_METHODS, client_address, refuse_cross_site
from vigil.platform.control.access.records import Role, UserRecord
from vigil.platform.control.plane import ControlPlane
from vigil.platform.errors import PermissionDenied, Unauthorized, UnsupportedMediaType
from vigil.platform.gateway.sign_in import sign_in
from vigil.platform.gateway.throttle import SignInThrottle

_STATE_KEY = "admin_user"
# A route's `opt` for the least role it needs, when that is more than viewer.
OPERATOR = {"role": Role.OPERATOR}
ADMIN = {"role": Role.ADMIN}


def same_site_only(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    if connection.scope.get("method") not in UNSAFE_METHODS:
        return
    refuse_cross_site(connection)
    headers = connection.headers
    has_body = int(headers.get("content-length") or 0) > 0 or "transfer-encoding" in headers
    media_type = (headers.get("content-type") or "").split(";")[0].strip().lower()
    if has_body and media_type != "application/json":
        raise UnsupportedMediaType(
            f"The admin API takes JSON bodies: send 'Content-Type: application/json' "
            f"(got {media_type or 'none'!r}).",
            code="unsupported_media_type",
        )


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


def admin_guard(plane: ControlPlane, throttle: SignInThrottle) -> Guard:
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
        user = await sign_in(plane, throttle, *credentials, client_address(connection))
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


def provide_user(request: Request[Any, Any, Any]) -> UserRecord:
    """The signed-in user."""
    user: UserRecord = request.state[_STATE_KEY]
    return user


def provide_actor(request: Request[Any, Any, Any]) -> str:
    """The signed-in user's name, for the audit log."""
    return provide_user(request).username
