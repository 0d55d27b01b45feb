"""The middleware that opens each API request's context (log ids, access line) and, with
tracing on, its trace: the server span joins an incoming `traceparent` from a trusted
peer (and links to anyone else's), and the response carries `x-vigil-trace-id`."""

from __future__ import annotations

from typing import cast

from litestar.types import ASGIApp, HTTPScope, Message, Receive, Scope, Send

from vigil.platform.telemetry.context import CURRENT, RequestContext
from vigil.platform.telemetry.tracing import TRACE_HEADER, Tracing

OBSERVED_PREFIX = "/v1/"


def observe_requests(tracing: Tracing | None):  # type: ignore[no-untyped-def]
    def middleware(app: ASGIApp) -> ASGIApp:
        async def observed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or not scope["path"].startswith(OBSERVED_PREFIX):
                await app(scope, receive, send)
                return
            method, path = cast("HTTPScope", scope)["method"], scope["path"]
            context = RequestContext(method, path)
            if tracing is not None:
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                client = scope.get("client")
                # The peer as the server saw it (rewritten only by a proxy it trusts).
                peer = client[0] if client else None
                context.trace = tracing.begin(method, path, headers, peer)
            status = 500

            async def send_observed(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                    headers = list(message.get("headers", []))
                    for key, value in headers:
                        if key.lower() == b"x-request-id" and context.request_id is None:
                            context.request_id = value.decode("latin-1")
                    if context.trace is not None:
                        headers.append((TRACE_HEADER.encode(), context.trace_id.encode()))  # type: ignore[union-attr]
                        message = {**message, "headers": headers}
                await send(message)

            token = CURRENT.set(context)
            try:
                await app(scope, receive, send_observed)
            finally:
                if context.trace is not None:
                    context.trace.close(status)
                context.access_line(status)
                CURRENT.reset(token)

        return observed

    return middleware
