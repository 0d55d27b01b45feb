"""The error answers each admin route documents in the OpenAPI schema (every one
carries the OpenAI-style error body of errors.py)."""

from __future__ import annotations

from litestar.openapi.datastructures import ResponseSpec

from vigil.platform.wire.errors import ErrorBody

_DESCRIPTIONS = {
    400: "Invalid request: `param` names the field to fix and the message says how.",
    401: "No credentials, or a wrong username or password, or a disabled user; answered "
    'with `WWW-Authenticate: Basic realm="vigil"`.',
    403: "The user's role may not do this; the message names the role needed.",
    404: "Nothing of that name; the message says where to list what exists.",
    409: "Clashes with the current state: a name already taken, a version in use, or a "
    "stale `revision` (the message gives the current one).",
    415: "A body that is not `application/json`.",
    429: "Too many failed sign-ins for this username or from this address; answered with "
    "`Retry-After`.",
}


def error_responses(*statuses: int) -> dict[int, ResponseSpec]:
    """400, 401, 403 and 429 always (any request can be malformed: a bad path parameter
    or Host header; any sign-in can fail or be throttled), and the statuses given.
    Documenting 400 here also keeps the framework's own 400 body, which the API never
    sends, out of the schema."""
    return {
        status: ResponseSpec(ErrorBody, description=_DESCRIPTIONS[status])
        for status in sorted({400, 401, 403, 429, *statuses})
    }


def write_responses(*statuses: int) -> dict[int, ResponseSpec]:
    """A write's: a body that is not JSON is refused too (see auth.same_site_only)."""
    return error_responses(415, *statuses)
