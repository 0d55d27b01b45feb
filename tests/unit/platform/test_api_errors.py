"""Each kind of Vigil error gets one HTTP status, OpenAI error type and headers."""

from __future__ import annotations

import pytest
from litestar import Litestar, get
from litestar.testing import AsyncTestClient

from vigil.platform.api.errors import EXCEPTION_HANDLERS
from vigil.platform.errors import (
    Conflict,
    EngineFailed,
    InvalidRequest,
    ModelNotFound,
    NotFound,
    PermissionDenied,
    QueueTimeout,
    RateLimited,
    ServiceUnavailable,
    Unauthorized,
    VigilError,
)

CASES: list[tuple[VigilError, int, str]] = [
    (InvalidRequest("bad", param="max_tokens", code="invalid_value"), 400, "invalid_request_error"),
    (ModelNotFound("gpt-9", ["chat"]), 404, "invalid_request_error"),
    (NotFound("no such user"), 404, "not_found_error"),
    (Conflict("stale"), 409, "conflict_error"),
    (Unauthorized("who?", scheme="Bearer"), 401, "authentication_error"),
    (PermissionDenied("no"), 403, "permission_error"),
    (RateLimited("slow down", retry_after_s=7), 429, "rate_limit_error"),
    (ServiceUnavailable("loading", retry_after_s=5), 503, "service_unavailable_error"),
    (
        QueueTimeout("waited", code="queue_timeout", retry_after_s=1),
        503,
        "service_unavailable_error",
    ),
    (EngineFailed("worker died", code="engine_error"), 500, "server_error"),
]


def _app(error: VigilError) -> Litestar:
    @get("/fail")
    async def fail() -> None:
        raise error

    return Litestar([fail], exception_handlers=EXCEPTION_HANDLERS)


@pytest.mark.parametrize(("error", "status", "error_type"), CASES)
async def test_each_error_kind_maps_to_its_status_and_body(
    error: VigilError, status: int, error_type: str
) -> None:
    async with AsyncTestClient(_app(error)) as client:
        response = await client.get("/fail")
    assert response.status_code == status
    assert response.json() == {
        "error": {
            "message": error.message,
            "type": error_type,
            "param": error.param,
            "code": error.code,
        }
    }
    expected_retry = None if error.retry_after_s is None else str(error.retry_after_s)
    assert response.headers.get("retry-after") == expected_retry


@pytest.mark.parametrize(
    ("scheme", "challenge"),
    [("Bearer", 'Bearer realm="vigil"'), ("Basic", 'Basic realm="vigil", charset="UTF-8"')],
)
async def test_unauthorized_names_the_credentials_to_send(scheme: str, challenge: str) -> None:
    async with AsyncTestClient(_app(Unauthorized("who?", scheme=scheme))) as client:
        response = await client.get("/fail")
    assert response.headers["www-authenticate"] == challenge
