"""Every error a client sees, mapped to HTTP in one place (OpenAI's error body), for
the API and the worker's app alike (the gateway's link reads a worker's refusal back
from the same body).

Vigil's own errors (vigil.platform.errors) get a status and an OpenAI error type by
their kind; Litestar's validation and routing errors are translated to the same body,
so that every 4xx says what to fix in one shape:
`{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from asyncpg.exceptions import (  # type: ignore[import-untyped]
    CannotConnectNowError,
    PostgresConnectionError,
)
from litestar import Request, Response
from litestar.exceptions import HTTPException, SerializationException, ValidationException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from litestar.types import ExceptionHandlersMap
from msgspec import Struct
from sqlalchemy import exc as sa_exc

from vigil.platform.control.db import database_unreachable
from vigil.platform.errors import (
    Conflict,
    EngineFailed,
    InvalidRequest,
    ModelNotFound,
    NotFound,
    PermissionDenied,
    RateLimited,
    ServiceUnavailable,
    Unauthorized,
    UnsupportedMediaType,
    VigilError,
)
from vigil.platform.wire.choices import choices_at, path_segments, with_choices

log = logging.getLogger(__name__)


CLIENT_GONE = "vigil.client_gone"  # in the scope's state once the client has left
CLIENT_CLOSED_REQUEST = 499  # nginx's status for it: nobody reads it, the client has gone


def client_gone(scope: Any) -> bool:
    """Whether the request's client left before its answer began (the API edge's
    middleware marks it in the scope's state)."""
    return bool(scope.get("state", {}).get(CLIENT_GONE))


class ErrorDetail(Struct):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(Struct):
    """OpenAI's error body; every 4xx and 5xx carries one, and so does a stream that fails
    after it began (as its last event before [DONE])."""

    error: ErrorDetail


_FIELD = re.compile(r"field `([^`]+)`")
_CHALLENGES = {
    "Basic": 'Basic realm="vigil", charset="UTF-8"',
    "Bearer": 'Bearer realm="vigil"',
}

# Most specific first: the first class an error is an instance of decides.
_STATUS: tuple[tuple[type[VigilError], int, str], ...] = (
    (ModelNotFound, 404, "invalid_request_error"),
    (NotFound, 404, "not_found_error"),
    (Conflict, 409, "conflict_error"),
    (UnsupportedMediaType, 415, "invalid_request_error"),
    (Unauthorized, 401, "authentication_error"),
    (PermissionDenied, 403, "permission_error"),
    (RateLimited, 429, "rate_limit_error"),
    (ServiceUnavailable, 503, "service_unavailable_error"),
    (EngineFailed, 500, "server_error"),
    (InvalidRequest, 400, "invalid_request_error"),
)


def http_status(exc: VigilError) -> tuple[int, str]:
    """The HTTP status and OpenAI error type of one of Vigil's errors."""
    for kind, status, error_type in _STATUS:
        if isinstance(exc, kind):
            return status, error_type
    return 400, "invalid_request_error"


def error_body(message: str, error_type: str, param: str | None, code: str | None) -> ErrorBody:
    return ErrorBody(ErrorDetail(message, error_type, param, code))


def body_of(exc: VigilError) -> ErrorBody:
    return error_body(exc.message, http_status(exc)[1], exc.param, exc.code)


def _headers(exc: VigilError) -> dict[str, str]:
    headers = {}
    if exc.retry_after_s is not None:
        headers["Retry-After"] = str(exc.retry_after_s)
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = _CHALLENGES[exc.scheme]
    return headers


def _vigil_error_handler(_: Request[Any, Any, Any], exc: VigilError) -> Response[ErrorBody]:
    status, error_type = http_status(exc)
    return Response(
        error_body(exc.message, error_type, exc.param, exc.code),
        status_code=status,
        headers=_headers(exc),
    )


def _validation_handler(
    request: Request[Any, Any, Any], exc: ValidationException
) -> Response[ErrorBody]:
    problems = exc.extra if isinstance(exc.extra, list) else []
    first = problems[0] if problems and isinstance(problems[0], dict) else {}
    key = first.get("key")
    detail = str(first.get("message") or exc.detail)
    param = None if key in (None, "data") else str(key)
    if param is not None:
        param, choices = _parameter_choices(request, param, first.get("source") == "body")
        detail = with_choices(detail, choices)
    if param is None and (named := _FIELD.search(detail)):
        # msgspec names a missing or unknown top-level field only in its message.
        param = named.group(1)
    where = f" for '{param}'" if param else ""
    message = f"Invalid request{where}: {detail}."
    if key == "data" and detail == "'data'":  # Litestar's whole word on a missing body
        message = "The request body is empty; send a JSON object."
    if len(problems) > 1:
        message += f" ({len(problems) - 1} more problem(s) in the request)"
    return Response(
        error_body(message, "invalid_request_error", param, "invalid_value"), status_code=400
    )


def _parameter_choices(
    request: Request[Any, Any, Any], key: str, in_body: bool
) -> tuple[str, tuple[str, ...] | None]:
    """The name a client sent for the field Litestar calls `key` (a query parameter's
    alias, not the handler's argument), and the values it takes if it is an enum."""
    fields = request.route_handler.parsed_fn_signature.parameters
    steps = path_segments(key)
    if in_body:
        data = fields.get("data")
        return key, choices_at(data.annotation, steps) if data is not None else None
    field = fields.get(key)
    if field is None:
        return key, None
    alias = getattr(field.kwarg_definition, "name", None) or key
    return alias, choices_at(field.annotation, [])


_HTTP_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}


def _client_left(request: Request[Any, Any, Any]) -> Response[ErrorBody] | None:
    """A client that left mid-request (its body cut short, say) makes Litestar raise a
    server error; it is the client's doing, and nobody reads the answer: 499, not logged."""
    if not client_gone(request.scope):
        return None
    body = error_body("The client closed the connection.", "client_closed_request", None, None)
    return Response(body, status_code=CLIENT_CLOSED_REQUEST)


def _http_handler(request: Request[Any, Any, Any], exc: HTTPException) -> Response[ErrorBody]:
    status = exc.status_code
    if status >= 500 and (left := _client_left(request)) is not None:
        return left
    if isinstance(exc.__cause__, SerializationException):
        message = f"The request body is not valid JSON ({exc.detail}); send a JSON object."
        return Response(
            error_body(message, "invalid_request_error", None, "invalid_json"), status_code=400
        )
    if status >= 500:
        log.error("server error: %s", exc.detail)
    error_type = _HTTP_TYPES.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    message = str(exc.detail)
    if status == 404 and message == "Not Found":
        message = f"No endpoint at {request.url.path}; the API is listed at /schema/openapi.json."
    elif status == 405:
        message = f"{request.method} is not allowed on {request.url.path}: {message}."
    elif status == 413:
        limit = request.route_handler.resolve_request_max_body_size()
        message = (
            f"The request body is larger than the {limit} bytes this server takes; split it "
            "over several requests."
        )
    return Response(
        error_body(message, error_type, None, None), status_code=status, headers=exc.headers
    )


DATABASE_RETRY_AFTER_S = 5


def _database_handler(_: Request[Any, Any, Any], exc: Exception) -> Response[ErrorBody]:
    """The control-plane database cannot be reached (restarting, unreachable): a 503 to
    retry, not a 500. Nothing was committed by the request that got it."""
    log.warning("control-plane database unavailable: %s", exc)
    return Response(
        error_body(
            "The control-plane database is unavailable; nothing was changed. Retry in "
            f"{DATABASE_RETRY_AFTER_S} s.",
            "server_error",
            None,
            "database_unavailable",
        ),
        status_code=503,
        headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
    )


def _driver_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[ErrorBody]:
    """A database error of another kind (SQLAlchemy's plain DBAPIError) that may still
    say the database is away: "the database system is starting up", say."""
    if database_unreachable(exc):
        return _database_handler(request, exc)
    return _unexpected_handler(request, exc)


def _unexpected_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[ErrorBody]:
    if (left := _client_left(request)) is not None:
        return left
    log.exception("unhandled error", exc_info=exc)
    return Response(
        error_body(
            "The server failed to handle the request; it has been logged.",
            "server_error",
            None,
            None,
        ),
        status_code=HTTP_500_INTERNAL_SERVER_ERROR,
    )


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    VigilError: _vigil_error_handler,
    ValidationException: _validation_handler,
    HTTPException: _http_handler,
    # The database gone: its connection refused or reset, asyncpg's or SQLAlchemy's word.
    ConnectionError: _database_handler,
    PostgresConnectionError: _database_handler,
    CannotConnectNowError: _database_handler,
    sa_exc.OperationalError: _database_handler,
    sa_exc.InterfaceError: _database_handler,
    sa_exc.DBAPIError: _driver_handler,
    Exception: _unexpected_handler,
}
