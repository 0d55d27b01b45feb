"""Blank lines on a silent generation stream, so that the gateway can tell a request
that is waiting (queued, or in a long prefill) from a worker it can no longer reach.

A link cut or a host gone sends no reset: without traffic the gateway's read would wait
forever. So the worker writes a blank line whenever its stream has said nothing for
KEEPALIVE_S, and the gateway ends a stream silent for longer than its idle bound
(gateway/link.py, STREAM_IDLE_S, a few keep-alives) with a clean error. Readers skip
blank lines.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

KEEPALIVE_S = 1.0
KEEPALIVE_LINE = b"\n"


async def with_keepalive(lines: AsyncIterator[bytes], every_s: float) -> AsyncIterator[bytes]:
    """`lines`, with KEEPALIVE_LINE whenever none came for `every_s`. Closing this
    iterator closes `lines` (the request is aborted on the engine).

    `lines` is read by a task of its own: waiting for its next line with a timeout
    would cancel (and so end) it, where a queue read can be cancelled safely."""
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for line in lines:
                queue.put_nowait(line)
        finally:
            queue.put_nowait(None)

    task = asyncio.create_task(pump(), name="keepalive-pump")
    try:
        while True:
            try:
                async with asyncio.timeout(every_s):
                    line = await queue.get()
            except TimeoutError:
                yield KEEPALIVE_LINE
                continue
            if line is None:
                break
            yield line
        await task  # raises what ended `lines`, if it failed
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
