"""Each kind of Vigil error gets one HTTP status, OpenAI error type and headers."""

from __future__ import annotations

import socket

import pytest
from asyncpg.exceptions import CannotConnectNowError  # type: ignore[import-untyped]
from litestar import Litestar, get
from litestar.testing import AsyncTestClient
from sqlalchemy import exc as sa_exc

from vigil.platform.api.admin import admin_router
from vigil.platform.control.db import create_engine, database_unreachable, session_factory
from vigil.platform.control.plane import ControlPlane
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
from vigil.platform.gateway.throttle import SignInThrottle
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.wire.errors import EXCEPTION_HANDLERS

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


def _app(error: Exception) -> Litestar:
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


async def test_an_unreachable_database_answers_503_with_retry_after_not_500() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = create_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/vigil")
    plane = ControlPlane(session_factory(engine))
    app = Litestar(
        [admin_router(plane, SignInThrottle(), SLOTracker())], exception_handlers=EXCEPTION_HANDLERS
    )
    async with AsyncTestClient(app) as client:
        for method, path in (("GET", "deployments"), ("POST", "webhooks")):
            r = await client.request(
                method,
                f"/api/admin/{path}/",
                auth=("ops", "password"),
                json={"name": "x", "url": "https://hooks.example/", "events": ["slo.burn"]},
            )
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "5"
            assert r.json()["error"]["code"] == "database_unavailable"
    await engine.dispose()


def test_a_driver_error_that_says_the_database_is_away_answers_503() -> None:
    """PostgreSQL starting up reaches SQLAlchemy as a plain DBAPIError, not an
    OperationalError: what it wraps decides."""
    starting = CannotConnectNowError("the database system is starting up")
    assert database_unreachable(sa_exc.DBAPIError("SELECT 1", {}, starting))
    assert database_unreachable(ConnectionRefusedError(111, "Connection refused"))
    assert not database_unreachable(sa_exc.DBAPIError("SELECT 1", {}, ValueError("bad")))


async def test_a_database_starting_up_answers_503_and_another_driver_error_500() -> None:
    starting = CannotConnectNowError("the database system is starting up")
    async with AsyncTestClient(_app(sa_exc.DBAPIError("SELECT", {}, starting))) as client:
        r = await client.get("/fail")
    assert r.status_code == 503 and r.json()["error"]["code"] == "database_unavailable"
    assert r.headers["retry-after"] == "5"
    async with AsyncTestClient(_app(sa_exc.DBAPIError("SELECT", {}, ValueError("x")))) as client:
        assert (await client.get("/fail")).status_code == 500
