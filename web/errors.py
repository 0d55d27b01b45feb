"""Errors under /console/ as a person sees them: not signed in -> the sign-in page (an
htmx request or the live stream gets 401, which the page's script turns into that), any
other refusal -> its message in the page's flash area with the admin API's status
(403 for a role or a missing CSRF token, 409 for a stale revision, ...), or an error page
when a whole page was asked for."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.response import Redirect
from litestar.types import ExceptionHandlersMap

from vigil.platform.errors import VigilError
from vigil.platform.wire.errors import http_status
from vigil.web.auth import NotSignedIn
from vigil.web.render import flash, is_htmx, render

log = logging.getLogger(__name__)
LOGIN = "/console/login"


def _not_signed_in(request: Request[Any, Any, Any], _: NotSignedIn) -> Response[Any]:
    wants_page = (
        request.method == "GET"
        and not is_htmx(request)
        and not request.route_handler.opt.get("stream")
        and "text/event-stream" not in request.headers.get("accept", "")
    )
    if wants_page:
        path = request.url.path if request.url.path != "/console" else "/console/"
        return Redirect(f"{LOGIN}?next={quote(path)}", status_code=303)
    return Response(
        "Sign in to use the console.",
        status_code=401,
        media_type="text/plain",
        headers={"HX-Redirect": LOGIN},
    )


def _answer(request: Request[Any, Any, Any], message: str, status_code: int) -> Response[Any]:
    if is_htmx(request):
        return flash(request, message, kind="error", status_code=status_code)
    return render(
        request, "console/error.html", status_code=status_code, message=message, status=status_code
    )


def _vigil_error(request: Request[Any, Any, Any], exc: VigilError) -> Response[Any]:
    return _answer(request, exc.message, http_status(exc)[0])


def _validation(request: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    problems = exc.extra if isinstance(exc.extra, list) else []
    parts = [
        f"{p.get('key')}: {p.get('message')}" if p.get("key") else str(p.get("message"))
        for p in problems
        if isinstance(p, dict)
    ]
    return _answer(request, "Check the form: " + ("; ".join(parts) or str(exc.detail)), 400)


def _http(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    message = str(exc.detail)
    if exc.status_code == 403 and "CSRF" in message:
        message = "The form was sent without this page's token (CSRF); reload the page and retry."
    elif exc.status_code == 404:
        message = f"Nothing at {request.url.path}."
    return _answer(request, message, exc.status_code)


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("console error", exc_info=exc)
    return _answer(request, "The server failed to do this; it has been logged.", 500)


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    NotSignedIn: _not_signed_in,
    VigilError: _vigil_error,
    ValidationException: _validation,
    HTTPException: _http,
    Exception: _unexpected,
}
