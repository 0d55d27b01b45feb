"""The middleware that opens each request's context (log ids, the one access line) and,
for the API under /v1/ with tracing on, its trace: the server span joins an incoming
`traceparent` from a trusted peer (and links to anyone else's), and the response carries
`x-vigil-trace-id`.

The access line is the only one a request gets (uvicorn's own is off): the path without
its query string, since a query can carry a credential (`?api_key=`); the client's
address as the gateway sees it (a trusted proxy's X-Forwarded-For, else the peer); and
the status. A client that leaves before its answer began (mid-body, say) is status 499,
a client's event: no server error is logged for it and its trace is no failure.
"""

from __future__ import annotations

from typing import cast

from litestar.types import ASGIApp, HTTPScope, Message, Receive, ReceiveMessage, Scope, Send

from vigil.platform.api.request_id import new_request_id
from vigil.platform.telemetry.context import CURRENT, RequestContext
from vigil.platform.telemetry.tracing import TRACE_HEADER, Tracing
from vigil.platform.wire.errors import CLIENT_CLOSED_REQUEST, CLIENT_GONE, client_gone

TRACED_PREFIX = "/v1/"
UNLOGGED_PREFIX = "/internal/workers/"  # a heartbeat a second per worker is noise


def observe_requests(tracing: Tracing | None):  # type: ignore[no-untyped-def]
    def middleware(app: ASGIApp) -> ASGIApp:
        async def observed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["path"].startswith(UNLOGGED_PREFIX):
                await app(scope, receive, send)
                return
            method, path = cast("HTTPScope", scope)["method"], scope["path"]
            context = RequestContext(method, path)
            client = scope.get("client")
            if client:
                context.note(client=client[0])
            if tracing is not None and path.startswith(TRACED_PREFIX):
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                # The peer as the server saw it (rewritten only by a proxy it trusts).
                peer = client[0] if client else None
                context.trace = tracing.begin(method, path, headers, peer)
            status = 500
            started = False

            async def receive_observed() -> ReceiveMessage:
                message = await receive()
                if message["type"] == "http.disconnect" and not started:
                    scope.setdefault("state", {})[CLIENT_GONE] = True
                return message

            async def send_observed(message: Message) -> None:
                nonlocal status, started
                if message["type"] == "http.response.start":
                    started = True
                    status = message["status"]
                    headers = list(message.get("headers", []))
                    for key, value in headers:
                        if key.lower() == b"x-request-id" and context.request_id is None:
                            context.request_id = value.decode("latin-1")
                    if context.trace is not None:
                        # Every traced response's id, a refused one's too (given here when
                        # the handler set none): the Traces page finds a trace by the
                        # x-request-id a caller reports.
                        if context.request_id is None:
                            context.request_id = new_request_id()
                            headers.append((b"x-request-id", context.request_id.encode()))
                        context.trace.set(**{"vigil.request_id": context.request_id})
                        headers.append((TRACE_HEADER.encode(), context.trace_id.encode()))  # type: ignore[union-attr]
                        message = {**message, "headers": headers}
                await send(message)

            token = CURRENT.set(context)
            try:
                await app(scope, receive_observed, send_observed)
            finally:
                if client_gone(scope):
                    status = CLIENT_CLOSED_REQUEST
                if context.trace is not None:
                    context.trace.close(status)
                context.access_line(status)
                CURRENT.reset(token)

        return observed

    return middleware
