"""The worker's keep-alives on a generation stream: blank lines while it is silent,
its own lines untouched, and closing it aborts what it wraps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from vigil.platform.worker.keepalive import KEEPALIVE_LINE, with_keepalive


async def test_blank_lines_fill_silence_and_the_lines_pass_in_order() -> None:
    async def slow() -> AsyncIterator[bytes]:
        yield b"a\n"
        await asyncio.sleep(0.35)
        yield b"b\n"

    out = [line async for line in with_keepalive(slow(), 0.1)]
    assert out[0] == b"a\n" and out[-1] == b"b\n"
    assert 2 <= out.count(KEEPALIVE_LINE) <= 4 and len(out) == 2 + out.count(KEEPALIVE_LINE)


async def test_a_stream_that_never_pauses_gets_no_keepalive() -> None:
    async def quick() -> AsyncIterator[bytes]:
        for i in range(100):
            yield b"%d\n" % i

    out = [line async for line in with_keepalive(quick(), 1.0)]
    assert out == [b"%d\n" % i for i in range(100)]


async def test_closing_early_closes_the_wrapped_stream() -> None:
    closed = asyncio.Event()

    async def endless() -> AsyncIterator[bytes]:
        try:
            while True:
                yield b"x\n"
                await asyncio.sleep(0.01)
        finally:
            closed.set()

    stream = with_keepalive(endless(), 1.0)
    assert await anext(stream) == b"x\n"
    await stream.aclose()
    assert closed.is_set()


async def test_an_error_in_the_wrapped_stream_is_raised() -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"a\n"
        raise RuntimeError("engine gone")

    with pytest.raises(RuntimeError, match="engine gone"):
        _ = [line async for line in with_keepalive(broken(), 1.0)]
