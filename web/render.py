"""How console handlers answer: a whole page, or (to htmx) the fragment it swaps, and an
error as a message in the page's flash area."""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.response import Template

from vigil.web.auth import STATE_KEY, Viewer

FLASH = "#flash"


def is_htmx(request: Request[Any, Any, Any]) -> bool:
    return request.headers.get("hx-request") == "true"


def viewer_of(request: Request[Any, Any, Any]) -> Viewer:
    viewer = request.state.get(STATE_KEY)
    return viewer if isinstance(viewer, Viewer) else Viewer(None)


def render(
    request: Request[Any, Any, Any],
    template: str,
    *,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> Template:
    """`template` with the viewer (who may see which controls) in its context."""
    return Template(
        template,
        context={"viewer": viewer_of(request), **context},
        status_code=status_code,
        headers=headers,
    )


def flash(
    request: Request[Any, Any, Any], message: str, *, kind: str = "ok", status_code: int = 200
) -> Template:
    """A message in the page's flash area, whatever element the request targeted."""
    return render(
        request,
        "console/_flash.html",
        status_code=status_code,
        headers={"HX-Retarget": FLASH, "HX-Reswap": "innerHTML"},
        message=message,
        kind=kind,
    )
