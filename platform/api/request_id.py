"""Every response carries x-request-id: the handler's own (the completion id) when it
set one, otherwise a new one, so that any answer, errors and 404s included, can be
traced."""

from __future__ import annotations

import uuid

from litestar.datastructures import MutableScopeHeaders
from litestar.types import Message, Scope


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex}"


async def add_request_id(message: Message, scope: Scope) -> None:
    """A `before_send` hook: it sees every message the application sends."""
    if message["type"] == "http.response.start":
        headers = MutableScopeHeaders.from_message(message)
        if "x-request-id" not in headers:
            headers["x-request-id"] = new_request_id()
