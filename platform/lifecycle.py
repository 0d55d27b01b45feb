"""Graceful stops for the gateway and the worker: SIGTERM starts a drain, not an exit.

SIGTERM -> drain(): the process says it is going (the gateway fails /readyz; a worker
           reports its engines draining, so the gateway routes nothing new to it) and
           waits until it may stop taking requests (the gateway: a delay for load
           balancers to notice; a worker: its running requests done, up to a bound)
        -> uvicorn's graceful shutdown: no new connections; requests still running
           finish, up to `timeout_graceful_shutdown`; then the process exits
a second SIGTERM or SIGINT -> the usual immediate shutdown
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from types import FrameType

import uvicorn

log = logging.getLogger(__name__)


class DrainingServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        begin: Callable[[], None],
        drain: Callable[[], Awaitable[None]],
    ) -> None:
        """`begin`: runs in the signal handler itself (flip what must flip at once);
        `drain`: awaited before the server stops taking connections."""
        super().__init__(config)
        self._begin = begin
        self._drain = drain
        self._draining: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGTERM or self._draining is not None or self.should_exit:
            super().handle_exit(sig, frame)
            return
        self._begin()
        loop = asyncio.get_running_loop()
        self._draining = loop.create_task(self._drain_then_exit(sig))

    async def _drain_then_exit(self, sig: int) -> None:
        log.info("SIGTERM: draining before shutdown")
        try:
            await self._drain()
        except Exception:
            log.exception("draining failed; shutting down now")
        log.info("drained: no new connections; running requests finish")
        super().handle_exit(sig, None)
