"""Signing in and out. The sign-in checks a user's password by the admin API's rules
(gateway/sign_in.py: the per-username and per-address throttle, lockouts audited), then
starts a session under a new id; a sign-in and a sign-out are audit entries about the
user. "Sign out everywhere" ends every session of the signed-in user, this one included
(on a shared or lost computer, say)."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

from litestar import Controller, Request, get, post
from litestar.params import QueryParameter
from litestar.response import Redirect, Response, Template

from vigil.platform.connection import client_address
from vigil.platform.errors import RateLimited, Unauthorized
from vigil.platform.gateway.sign_in import sign_in
from vigil.web.auth import PUBLIC, Viewer, session_for
from vigil.web.deps import Plane, SignIns
from vigil.web.render import render, viewer_of

HOME = "/console/"


def _next(value: object) -> str:
    """Where to go after signing in: a console path of this site, never another site."""
    if not isinstance(value, str):
        return HOME
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not parts.path.startswith("/console/"):
        return HOME
    return value


class SignInController(Controller):
    path = "/"
    opt = PUBLIC

    @get("/login")
    async def form(
        self,
        request: Request[Any, Any, Any],
        next_path: Annotated[str | None, QueryParameter(name="next")] = None,
    ) -> Response[Any]:
        if viewer_of(request).user is not None:
            return Redirect(_next(next_path), status_code=303)
        return render(request, "console/login.html", next=_next(next_path), message=None)

    @post("/login")
    async def sign_in(
        self, request: Request[Any, Any, Any], plane: Plane, sign_ins: SignIns
    ) -> Response[Any]:
        form = await request.form()
        username, password = str(form.get("username") or ""), str(form.get("password") or "")
        target = _next(form.get("next"))
        address = client_address(request)
        try:
            user = await sign_in(plane, sign_ins, username, password, address)
        except RateLimited as exc:
            return _again(
                request, target, exc.message, 429, {"Retry-After": str(exc.retry_after_s)}
            )
        except Unauthorized:
            return _again(
                request, target, "Wrong username or password, or the user is disabled.", 401
            )
        # The epoch as stored now: a sign-in remembered by another gateway's cache may
        # predate a "sign out everywhere", and its session would end at once.
        request.set_session(session_for(await plane.users.get(user.username)))
        details = {"address": address, "via": "console"}
        await plane.audit.record(user.username, "user.sign_in", "user", user.username, details)
        return Redirect(target, status_code=303)

    @post("/logout")
    async def sign_out(self, request: Request[Any, Any, Any], plane: Plane) -> Redirect:
        viewer: Viewer = viewer_of(request)
        if viewer.user is not None:
            details = {"address": client_address(request), "via": "console"}
            await plane.audit.record(
                viewer.user.username, "user.sign_out", "user", viewer.user.username, details
            )
        request.clear_session()
        return Redirect("/console/login", status_code=303)

    @post("/logout-everywhere")
    async def sign_out_everywhere(self, request: Request[Any, Any, Any], plane: Plane) -> Redirect:
        viewer: Viewer = viewer_of(request)
        if viewer.user is not None:
            await plane.users.sign_out_everywhere(viewer.user.username, actor=viewer.user.username)
        request.clear_session()
        return Redirect("/console/login", status_code=303)


def _again(
    request: Request[Any, Any, Any],
    target: str,
    message: str,
    status_code: int,
    headers: dict[str, str] | None = None,
) -> Template:
    return render(
        request,
        "console/login.html",
        status_code=status_code,
        headers=headers,
        next=target,
        message=message,
    )
