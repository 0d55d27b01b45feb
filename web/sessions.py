"""The console's server-side sessions: Litestar's session middleware over a store in the
control-plane database (see control/access/sessions.py for why the database).

Two changes to the middleware's backend: a request that has no session and makes none
writes nothing (a visit to the sign-in page is no row, and no cookie), and signing in
moves the session to a new id, so that an id planted in a browser before sign-in
(session fixation) never becomes a signed-in one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie, MutableScopeHeaders
from litestar.middleware.session.server_side import (
    ServerSideSessionBackend,
    ServerSideSessionConfig,
)
from litestar.stores.base import Store
from litestar.types import Empty, Message, ScopeSession
from litestar.utils.dataclass import extract_dataclass_items

from vigil.platform.control.access.sessions import SessionService

STORE_NAME = "console-sessions"
COOKIE = "vigil_session"
NEW_ID = "_new_id"  # set by sign-in: the backend moves the session to a new id


class DatabaseStore(Store):
    """Litestar's Store contract over the control plane's session table."""

    def __init__(self, sessions: SessionService) -> None:
        self.sessions = sessions

    async def set(
        self, key: str, value: str | bytes, expires_in: int | timedelta | None = None
    ) -> None:
        data = value.encode() if isinstance(value, str) else value
        await self.sessions.set(key, data, _seconds(expires_in))

    async def get(self, key: str, renew_for: int | timedelta | None = None) -> bytes | None:
        return await self.sessions.get(key, _seconds(renew_for) if renew_for else None)

    async def delete(self, key: str) -> None:
        await self.sessions.delete(key)

    async def delete_all(self) -> None:
        await self.sessions.delete_all()

    async def exists(self, key: str) -> bool:
        return await self.sessions.expires_in_s(key) is not None

    async def expires_in(self, key: str) -> int | None:
        return await self.sessions.expires_in_s(key)


def _seconds(value: int | timedelta | None) -> int:
    if value is None:
        return 0
    return int(value.total_seconds()) if isinstance(value, timedelta) else int(value)


class SignInBackend(ServerSideSessionBackend):
    async def store_in_message(
        self,
        scope_session: ScopeSession,
        message: Message,
        connection: ASGIConnection[Any, Any, Any, Any],
    ) -> None:
        had_cookie = bool(connection.cookies.get(self.config.key))
        if scope_session is Empty or not scope_session:
            if had_cookie:  # signed out, or a session that expired: forget it here too
                await super().store_in_message(Empty, message, connection)
            return
        if isinstance(scope_session, dict) and scope_session.pop(NEW_ID, False):
            store = self.config.get_store_from_app(connection.scope["app"])
            if had_cookie:
                await self.delete(self.get_session_id(connection), store)
            session_id = self.generate_session_id()
            await self.set(session_id, self.serialize_data(scope_session, connection.scope), store)
            params = extract_dataclass_items(
                self.config, exclude_none=True, include=Cookie.__dict__.keys()
            )
            cookie = Cookie(value=session_id, key=self.config.key, **dict(params))
            MutableScopeHeaders.from_message(message).add("Set-Cookie", cookie.to_header(header=""))
            return
        await super().store_in_message(scope_session, message, connection)


@dataclass
class SignInSessionConfig(ServerSideSessionConfig):
    _backend_class = SignInBackend


def session_config(max_age_s: int) -> SignInSessionConfig:
    """Sessions that end `max_age_s` after the last request (each request renews it);
    the cookie is HttpOnly and SameSite=Lax, scoped to the console."""
    return SignInSessionConfig(
        key=COOKIE,
        store=STORE_NAME,
        max_age=max_age_s,
        path="/console",
        httponly=True,
        samesite="lax",
        renew_on_access=False,  # every answer writes the session back with a new expiry
    )
