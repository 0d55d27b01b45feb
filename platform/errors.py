"""The errors Vigil raises for a request it will not serve: one hierarchy for every part.

A part raises what went wrong in its own words (the field to fix, a stable code, when
to retry); nothing here knows HTTP. `vigil.platform.wire.errors` maps each kind to a
status and OpenAI's error body, in one place.
"""

from __future__ import annotations


class VigilError(Exception):
    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param  # the request field to fix, when one is at fault
        self.code = code  # stable, for programs: "context_length_exceeded", ...
        self.retry_after_s = retry_after_s  # when the same request may succeed


class InvalidRequest(VigilError):
    """Bad input: the message says what to fix."""


class ModelNotFound(VigilError):
    def __init__(self, model: str, available: list[str]) -> None:
        names = ", ".join(available) or "none"
        super().__init__(
            f"The model '{model}' does not exist. Available models: {names}.",
            param="model",
            code="model_not_found",
        )


class NotFound(VigilError):
    """The resource a request names does not exist."""


class UnsupportedMediaType(VigilError):
    """A body in a format this endpoint does not take."""


class Conflict(VigilError):
    """The request is valid but clashes with the current state: a name that is taken, or
    a write based on a stale revision. The message says what the state is now."""


class Unauthorized(VigilError):
    """No credentials, or ones that are unknown or revoked. `scheme` is the kind of
    credentials the caller should send ("Bearer" API keys, "Basic" passwords)."""

    def __init__(
        self, message: str, *, scheme: str, code: str | None = None, param: str | None = None
    ) -> None:
        super().__init__(message, param=param, code=code)
        self.scheme = scheme


class PermissionDenied(VigilError):
    """Valid credentials that may not do this."""


class RateLimited(VigilError):
    """A key's own rate limit, or a deployment shedding load; always says when to retry."""

    def __init__(self, message: str, *, retry_after_s: int, code: str | None = None) -> None:
        super().__init__(message, code=code, retry_after_s=retry_after_s)


class ServiceUnavailable(VigilError):
    """Vigil cannot serve this now (a model still loading, no live worker); it may later."""


class QueueTimeout(ServiceUnavailable):
    """The request waited in the queue past its deadline and never started."""


class EngineFailed(VigilError):
    """The engine or its worker failed while running the request."""
