"""Registration and heartbeats: the worker's side of the protocol, with every gateway it
serves (one, or several sharing one PostgreSQL).

Each gateway gets its own loop (a gateway that hangs cannot delay the heartbeats to the
others): register, then heart-beat every second with the slots' states and stats; the
answer is that gateway's assignment. A gateway that cannot be reached, or that restarted
and no longer knows the worker, is registered with again at the next beat.

The worker runs the union of the assignments of the gateways it is registered with.
Gateways on one database assign the same slots, except for the second or so in which a
change has reached one and not yet the other: the union loads the new version before
the old one is drained, never the other way round. A gateway that is lost drops out of
the union; when every gateway is lost the worker changes nothing, and keeps serving the
requests it has and the slots it runs until one comes back.

With `resolve_gateways`, each gateway URL's host name is looked up every
RESOLVE_INTERVAL_S and the worker serves every address it resolves to: behind a
Kubernetes headless Service, one per gateway pod, as pods come and go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import httpx
import msgspec

from vigil.engine.device import free_memory_bytes
from vigil.platform.settings import WorkerSettings
from vigil.platform.wire.worker import (
    Assignment,
    CostsWire,
    Heartbeat,
    PrecisionWire,
    RegisterRequest,
    SlotLimits,
    SlotReport,
    StatsWire,
)
from vigil.platform.worker.runtime import EngineSlot, Slot, WorkerRuntime

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 1.0
# A gateway away for this long is warned about. Shorter absences are a gateway shutting
# down before its local workers (`vigil serve` stopping) or restarting: logged at info.
LOST_WARNING_S = 5.0
clock = time.monotonic  # read at each call, so tests can move it
CALL_TIMEOUT_S = 10.0
RESOLVE_INTERVAL_S = 5.0


def union_of(assignments: list[list[EngineSlot]]) -> list[EngineSlot]:
    """Every slot any of the assignments names, once (by key; the first one wins)."""
    slots: dict[str, EngineSlot] = {}
    for assignment in assignments:
        for slot in assignment:
            slots.setdefault(slot.key, slot)
    return list(slots.values())


def report(slot: Slot) -> SlotReport:
    limits, stats, costs = None, None, None
    if slot.engine is not None:
        core = slot.engine.core
        limits = SlotLimits(
            core.max_model_len,
            core.kv_capacity_tokens,
            core.config.max_num_seqs,
            block_size=core.config.block_size,
            kv_bytes_per_token=core.kv_bytes_per_token,
            max_num_batched_tokens=core.config.max_num_batched_tokens,
            prefix_caching=core.config.enable_prefix_caching,
        )
        stats = StatsWire.of(slot.engine.stats())
        measured = slot.profile.costs()
        costs = CostsWire.of(measured) if measured is not None else None
    return SlotReport(
        key=slot.spec.key,
        state=slot.state.value,
        progress=slot.progress,
        error=slot.error,
        limits=limits,
        stats=stats,
        costs=costs,
        precision=None if slot.precision is None else PrecisionWire.of(slot.precision),
    )


def lookup(host: str) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]


def resolved_urls(urls: tuple[str, ...], resolve: Callable[[str], list[str]]) -> list[str]:
    """Each URL once per address its host resolves to (sorted, repeats dropped)."""
    found: list[str] = []
    for url in urls:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        for address in sorted(set(resolve(parts.hostname or ""))):
            host = f"[{address}]" if ":" in address else address
            found.append(urlunsplit(parts._replace(netloc=f"{host}{port}")))
    return list(dict.fromkeys(found))


def _slots(assignment: Assignment) -> list[EngineSlot]:
    return [EngineSlot(s.key, s.version.ref(), s.max_num_seqs) for s in assignment.slots]


class GatewayLink:
    """One gateway: whether the worker is registered there, and its last assignment."""

    def __init__(
        self,
        url: str,
        links: GatewayLinks,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self.registered = False
        self._lost_since: float | None = None  # since when the gateway has not answered
        self._warned = False
        self.assignment: list[EngineSlot] = []
        self._links = links
        self._client = httpx.AsyncClient(
            base_url=url,
            timeout=CALL_TIMEOUT_S,
            headers={"Authorization": f"Bearer {links.settings.worker_token}"},
            transport=transport,
        )

    async def run(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)

    async def beat(self) -> None:
        """One registration or heartbeat; a failure only marks the gateway lost."""
        try:
            await self._beat()
        except (httpx.HTTPError, msgspec.DecodeError) as exc:
            self._lost(exc)
        else:
            self._lost_since, self._warned = None, False
        self._links.reconcile()

    def _lost(self, exc: Exception) -> None:
        now = clock()
        if self.registered:
            log.info("gateway %s unreachable (%s); will register again", self.url, exc)
        if self._lost_since is None:  # lost now, or not reached yet since the start
            self._lost_since = now
        elif not self._warned:
            away = now - self._lost_since
            if away >= LOST_WARNING_S:
                log.warning(
                    "gateway %s unreachable for %.0f s (%s); will register again when it answers",
                    self.url,
                    away,
                    exc,
                )
                self._warned = True
        self.registered = False

    async def _beat(self) -> None:
        settings, runtime = self._links.settings, self._links.runtime
        if not self.registered:
            body = RegisterRequest(
                settings.worker_id,
                self._links.address,
                str(runtime.device),
                free_memory_bytes(runtime.device),
                os.getpid(),
            )
            response = await self._client.post(
                "/internal/workers/register", content=msgspec.json.encode(body)
            )
        else:
            beat = Heartbeat([report(s) for s in runtime.slots.values()])
            response = await self._client.post(
                f"/internal/workers/{settings.worker_id}/heartbeat",
                content=msgspec.json.encode(beat),
            )
            if response.status_code == 404:  # the gateway restarted and forgot us
                log.warning("gateway %s forgot this worker; registering again", self.url)
                self.registered = False
                return
        response.raise_for_status()
        self.assignment = _slots(msgspec.json.decode(response.content, type=Assignment))
        if not self.registered:
            log.info("registered with %s as %s", self.url, settings.worker_id)
        self.registered = True

    async def close(self) -> None:
        await self._client.aclose()


class GatewayLinks:
    def __init__(
        self,
        settings: WorkerSettings,
        runtime: WorkerRuntime,
        address: str,
        transport: httpx.AsyncBaseTransport | None = None,
        resolve: Callable[[str], list[str]] = lookup,
    ) -> None:
        """`transport`: the HTTP transport of every link (tests pass a fake one);
        `resolve`: a host name's addresses (with settings.resolve_gateways)."""
        self.settings = settings
        self.runtime = runtime
        self.address = address
        self._transport = transport
        self._resolve = resolve
        self.links = [GatewayLink(url, self, transport) for url in settings.gateway_urls]
        self._beats: dict[str, asyncio.Task[None]] = {}

    @property
    def num_registered(self) -> int:
        return sum(link.registered for link in self.links)

    def reconcile(self) -> None:
        registered = [link.assignment for link in self.links if link.registered]
        if registered:
            self.runtime.reconcile(union_of(registered))

    async def run(self) -> None:
        """Heartbeats to every gateway until cancelled, or until the parent process is
        gone when the worker was started to exit with it."""
        parent = os.getppid()
        resolved_ts = float("-inf")
        try:
            while True:
                now = asyncio.get_running_loop().time()
                if self.settings.resolve_gateways and now - resolved_ts >= RESOLVE_INTERVAL_S:
                    resolved_ts = now
                    await self.resolve_links()
                for link in self.links:
                    if link.url not in self._beats:
                        self._beats[link.url] = asyncio.create_task(link.run())
                self.runtime.stop_drained()
                if self.settings.exit_with_parent and os.getppid() != parent:
                    log.info("parent process gone: stopping")
                    return
                await asyncio.sleep(HEARTBEAT_INTERVAL_S)
        finally:
            for url in list(self._beats):
                await self._stop_beating(url)

    async def resolve_links(self) -> None:
        """One link per address the gateway names resolve to now: new gateways are
        registered with, gone ones dropped. A failed lookup changes nothing."""
        urls = self.settings.gateway_urls
        try:
            wanted = await asyncio.to_thread(resolved_urls, urls, self._resolve)
        except OSError as exc:
            log.warning("could not resolve the gateways (%s); keeping %d", exc, len(self.links))
            return
        have = {link.url: link for link in self.links}
        for url in set(have) - set(wanted):
            log.info("gateway %s is gone from %s", url, ", ".join(urls))
            await self._stop_beating(url)
            await have[url].close()
        self.links = [have.get(url) or GatewayLink(url, self, self._transport) for url in wanted]
        self.reconcile()

    async def _stop_beating(self, url: str) -> None:
        task = self._beats.pop(url, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def beat(self) -> None:
        """One beat to every gateway at once (a draining worker tells them all)."""
        await asyncio.gather(*(link.beat() for link in self.links))

    async def close(self) -> None:
        for link in self.links:
            await link.close()
