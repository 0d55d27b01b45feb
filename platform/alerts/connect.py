"""The HTTP client webhooks are delivered with: it resolves a receiver's name once,
checks every address against the webhook address policy
(control/webhooks/addresses.py), and connects to the address it checked. The URL keeps
the name, so the Host header and TLS (SNI and the certificate's name) are the name's;
only the TCP connection is pinned. httpcore's network backend is the seam: it is
handed the host of each new connection, whatever the URL parser made of it.

No proxy from the environment (it would make the connection the policy never sees) and
no redirects (a receiver could send the gateway on to an internal address).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterable

import httpcore
import httpx

from vigil.platform.control.webhooks.addresses import (
    AddressRefused,
    WebhookAddressPolicy,
    choose_address,
    literal_address,
)

# host -> the addresses it resolves to (a test gives its own: a name that "changed").
Resolver = Callable[[str], Awaitable[list[str]]]


async def resolve(host: str) -> list[str]:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpcore.ConnectError(f"{host} does not resolve: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to an address the policy allows, the one it checked."""

    def __init__(self, policy: WebhookAddressPolicy, resolver: Resolver = resolve) -> None:
        self._policy = policy
        self._resolver = resolver
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        literal = literal_address(host)  # a refused spelling raises AddressRefused here
        addresses = [str(literal)] if literal is not None else await self._resolver(host)
        address = choose_address(host, addresses, self._policy)
        return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise AddressRefused("a webhook may not call a unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class PinnedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, policy: WebhookAddressPolicy, resolver: Resolver = resolve) -> None:
        super().__init__(trust_env=False)
        # httpx builds its pool without a way to name the network backend; this is the
        # same pool (TLS verified with httpx's defaults) on the pinning backend.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            network_backend=PinnedBackend(policy, resolver),
        )


def webhook_client(policy: WebhookAddressPolicy, resolver: Resolver = resolve) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=PinnedTransport(policy, resolver), trust_env=False, follow_redirects=False
    )
