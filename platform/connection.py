"""What the API and the console read off a connection alike: the client's address, and
whether a browser says a write comes from another site.

Browsers send credentials by themselves (Basic credentials once typed, the console's
session cookie), so a page on another site could make a signed-in browser send a write.
A browser marks where a request comes from (Sec-Fetch-Site, Origin); scripts and CLIs
send neither header and are unaffected.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from litestar.connection import ASGIConnection

from vigil.platform.errors import PermissionDenied

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SAME_SITE = frozenset({"same-origin", "none"})  # Sec-Fetch-Site of a page's own, or typed


def refuse_cross_site(connection: ASGIConnection[Any, Any, Any, Any]) -> None:
    """A write a browser marks as coming from another site is refused (the console's
    forms carry a CSRF token as well; this holds even if one leaked)."""
    headers = connection.headers
    site = headers.get("sec-fetch-site")
    origin = headers.get("origin")
    if (site is not None and site not in SAME_SITE) or (
        origin is not None and urlsplit(origin).netloc != headers.get("host")
    ):
        raise PermissionDenied(
            f"A write to the admin API from another site ({origin or site}) is refused: "
            "call it from a script, the CLI or this server's own console.",
            code="cross_site_request",
        )


def client_address(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    return connection.client.host if connection.client else "unknown"
