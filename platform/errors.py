"""One error hierarchy for the API, mapped to HTTP in one place (OpenAI's error body).

Bad input raises an APIError subclass at the boundary; Litestar's own
validation and routing errors are translated to the same body so that every
4xx a client sees says what to fix, in the same shape:
`{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, SerializationException, ValidationException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from litestar.types import ExceptionHandlersMap

from vigil.platform.api.openai_schemas import ErrorBody, ErrorDetail

log = logging.getLogger(__name__)

_FIELD = re.compile(r"field `([^`]+)`")


class APIError(Exception):
    status_code = 400
    error_type = "invalid_request_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}


class InvalidRequest(APIError):
    pass


class ModelNotFound(APIError):
    status_code = 404

    def __init__(self, model: str, available: list[str]) -> None:
        names = ", ".join(available) or "none"
        super().__init__(
            f"The model '{model}' does not exist. Available models: {names}.",
            param="model",
            code="model_not_found",
        )


class NotFound(APIError):
    """The resource named in the path does not exist."""

    status_code = 404
    error_type = "not_found_error"


class Conflict(APIError):
    """The request is valid but clashes with the current state: a name that is taken, or
    a write based on a stale revision. The message says what the state is now."""

    status_code = 409
    error_type = "conflict_error"


class ServiceUnavailable(APIError):
    status_code = 503
    error_type = "service_unavailable_error"


class Unauthorized(APIError):
    """No API key, or one that is unknown or revoked."""

    status_code = 401
    error_type = "authentication_error"


class PermissionDenied(APIError):
    """A valid API key that may not use this model."""

    status_code = 403
    error_type = "permission_error"


class RateLimited(APIError):
    """429: the key's own rate limit, or the deployment shedding load. Always carries
    Retry-After."""

    status_code = 429
    error_type = "rate_limit_error"


def error_body(message: str, error_type: str, param: str | None, code: str | None) -> ErrorBody:
    return ErrorBody(ErrorDetail(message, error_type, param, code))


def _api_error_handler(_: Request[Any, Any, Any], exc: APIError) -> Response[ErrorBody]:
    return Response(
        error_body(exc.message, exc.error_type, exc.param, exc.code),
        status_code=exc.status_code,
        headers=exc.headers,
    )


def _validation_handler(_: Request[Any, Any, Any], exc: ValidationException) -> Response[ErrorBody]:
    problems = exc.extra if isinstance(exc.extra, list) else []
    first = problems[0] if problems and isinstance(problems[0], dict) else {}
    key = first.get("key")
    detail = str(first.get("message") or exc.detail)
    param = None if key in (None, "data") else str(key)
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


def _http_handler(request: Request[Any, Any, Any], exc: HTTPException) -> Response[ErrorBody]:
    status = exc.status_code
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
        message = "The request body is larger than this server takes; split it over requests."
    return Response(
        error_body(message, error_type, None, None), status_code=status, headers=exc.headers
    )


def _unexpected_handler(_: Request[Any, Any, Any], exc: Exception) -> Response[ErrorBody]:
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
    APIError: _api_error_handler,
    ValidationException: _validation_handler,
    HTTPException: _http_handler,
    Exception: _unexpected_handler,
}
