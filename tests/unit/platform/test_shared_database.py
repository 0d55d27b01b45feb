"""Gateways sharing one PostgreSQL, in one process: each hears the others' admin writes
(LISTEN/NOTIFY, and the poll of the audit log when a notice is lost), through a
dropped connection too; and exactly one of them owns the loops, another taking them over
when the owner's session ends."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest

from vigil.platform.control.audit.service import AuditService
from vigil.platform.control.changes import ChangeFeed, asyncpg_dsn
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.migrate import migrate
from vigil.platform.control.ownership import IDLE_SESSION_TIMEOUT_MS, LoopOwnership

pytestmark = pytest.mark.postgres


@pytest.fixture
def database(postgres_url: str) -> str:
    migrate(postgres_url)
    return postgres_url


async def wait_until(condition: Callable[[], bool], within_s: float, what: str) -> float:
    """Seconds until `condition` held; fails after `within_s`."""
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < within_s, f"not within {within_s} s: {what}"
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


async def drop_connections(url: str) -> None:
    """What a PostgreSQL restart does to every session on the database."""
    dsn = asyncpg_dsn(url)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()


async def stopped(*tasks: asyncio.Task[None]) -> None:
    """Cancel and wait, bounded: a loop that swallows its cancellation (as one awaiting
    asyncio.wait_for can on Python 3.11) fails here instead of hanging the suite."""
    for task in tasks:
        task.cancel()
    async with asyncio.timeout(5):
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def running(*tasks: asyncio.Task[None]) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await stopped(*tasks)


async def test_a_gateway_hears_anothers_writes_and_not_its_own(database: str) -> None:
    one_db, two_db = create_engine(database), create_engine(database)
    one, two = ChangeFeed(one_db, poll_interval_s=0.3), ChangeFeed(two_db, poll_interval_s=0.3)
    heard = {"one": 0, "two": 0}

    def counter(name: str):  # type: ignore[no-untyped-def]
        async def count() -> None:
            heard[name] += 1

        return count

    tasks = (
        asyncio.create_task(one.run(counter("one"))),
        asyncio.create_task(two.run(counter("two"))),
    )
    try:
        async with running(*tasks):
            # Each applies what was written while nobody listened once it listens.
            await wait_until(lambda: min(heard.values()) >= 1, 10, "both listening")
            base = dict(heard)
            await one.announce()
            # Heard through NOTIFY: a notice moves no marker, so the poll cannot hear it.
            await wait_until(lambda: heard["two"] > base["two"], 10, "two heard one")
            # Its own notice, already applied, is skipped: one hears two's later notice
            # (notices arrive in order) and only that one.
            await two.announce()
            await wait_until(lambda: heard["one"] > base["one"], 10, "one heard two")
            assert heard["one"] == base["one"] + 1

            # A write whose notice is lost (the writer died after its commit): the poll.
            base = dict(heard)
            await AuditService(session_factory(one_db)).record("cli", "key.revoke", "key", "k", {})
            await wait_until(lambda: heard["two"] > base["two"], 2, "two polled the write")

            # Every connection dropped (a database restart): listening again, and hearing.
            # (It may notice and reconnect between two looks at its flag: ask what matters,
            # that a notice sent after the drop is heard, within the reconnect bound.)
            await drop_connections(database)
            base = dict(heard)
            deadline = time.monotonic() + 15
            while heard["two"] == base["two"] and time.monotonic() < deadline:
                with contextlib.suppress(Exception):  # one's own connections were dropped too
                    await one.announce()
                await asyncio.sleep(0.5)
            assert heard["two"] > base["two"], "two never heard a notice after the drop"
            assert two.listening
    finally:
        await one_db.dispose()
        await two_db.dispose()


async def test_one_gateway_owns_the_loops_and_another_takes_over_when_it_goes(
    database: str,
) -> None:
    gateways = [LoopOwnership(database, check_interval_s=0.1) for _ in range(3)]
    changes: list[tuple[int, bool]] = []

    def recorder(i: int):  # type: ignore[no-untyped-def]
        async def changed(owner: bool) -> None:
            changes.append((i, owner))

        return changed

    tasks = [asyncio.create_task(g.run(recorder(i))) for i, g in enumerate(gateways)]

    def owners() -> list[int]:
        return [i for i, g in enumerate(gateways) if g.is_owner]

    async with running(*tasks):
        await wait_until(lambda: len(owners()) == 1, 10, "one owner")
        for _ in range(10):  # and it stays one
            await asyncio.sleep(0.05)
            assert len(owners()) == 1
        [first] = owners()
        assert changes == [(first, True)]

        await stopped(tasks[first])  # the owner stops: its session ends with its connection
        # Well before the server would end a silent session: the lock went with the close.
        within_s = IDLE_SESSION_TIMEOUT_MS / 1000 / 2
        await wait_until(lambda: len(owners()) == 1, within_s, "another owner")
        [second] = owners()
        assert second != first
        assert changes[-2:] == [(first, False), (second, True)]

        await drop_connections(database)  # the server ends every session
        await wait_until(lambda: len(owners()) == 0, 3, "the owner stood down")
        await wait_until(lambda: len(owners()) == 1, 5, "an owner again")


def test_sqlite_always_owns_and_shares_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite+aiosqlite:///{tmp_path / 'vigil.db'}"
    assert LoopOwnership(url).is_owner
    assert not ChangeFeed(create_engine(url)).shared
    assert asyncpg_dsn("postgresql+psycopg://u:p@db:5432/vigil") == "postgresql://u:p@db:5432/vigil"
