"""Console sessions in the control-plane database: only a hash of the id is stored, an
expired session reads as none, unchanged sessions are not rewritten on every request,
and expired ones are purged."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from vigil.platform.control.access.sessions import SessionService, needs_write, renew_step
from vigil.platform.control.access.tables import ConsoleSession
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.migrate import migrate

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[tuple[SessionService, Clock]]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'vigil.db'}"
    await asyncio.to_thread(migrate, url)
    engine = create_engine(url)
    clock = Clock()
    try:
        yield SessionService(session_factory(engine), clock=clock), clock
    finally:
        await engine.dispose()


async def stored(service: SessionService) -> list[ConsoleSession]:
    async with service._sessions() as session:
        return list((await session.execute(select(ConsoleSession))).scalars())


async def test_only_a_hash_of_the_id_is_stored(sessions: tuple[SessionService, Clock]) -> None:
    service, _ = sessions
    await service.set("the-secret-id", b'{"username":"otto"}', 600)
    (row,) = await stored(service)
    assert row.key_hash == hashlib.sha256(b"the-secret-id").hexdigest()
    assert await service.get("the-secret-id") == b'{"username":"otto"}'
    assert await service.get("another-id") is None


async def test_an_expired_session_reads_as_none_and_is_deleted(
    sessions: tuple[SessionService, Clock],
) -> None:
    service, clock = sessions
    await service.set("id", b"{}", 600)
    clock.now = T0 + timedelta(seconds=599)
    assert await service.expires_in_s("id") == 1
    clock.now = T0 + timedelta(seconds=600)
    assert await service.get("id") is None
    assert await stored(service) == []


async def test_an_unchanged_session_is_rewritten_only_when_its_expiry_moves_a_minute(
    sessions: tuple[SessionService, Clock],
) -> None:
    service, clock = sessions
    await service.set("id", b"{}", 600)
    clock.now = T0 + timedelta(seconds=30)
    await service.set("id", b"{}", 600)
    assert (await stored(service))[0].expires_at.replace(tzinfo=UTC) == T0 + timedelta(seconds=600)
    clock.now = T0 + timedelta(seconds=61)
    await service.set("id", b"{}", 600)
    assert (await stored(service))[0].expires_at.replace(tzinfo=UTC) == T0 + timedelta(seconds=661)
    await service.set("id", b'{"username":"ada"}', 600)  # new data: always written
    assert await service.get("id") == b'{"username":"ada"}'


async def test_purge_deletes_only_expired_sessions(sessions: tuple[SessionService, Clock]) -> None:
    service, clock = sessions
    await service.set("old", b"{}", 60)
    await service.set("new", b"{}", 600)
    clock.now = T0 + timedelta(seconds=120)
    assert await service.purge_expired() == 1
    assert await service.get("new") == b"{}" and await service.get("old") is None


def test_the_renewal_step_stays_below_the_idle_timeout() -> None:
    assert renew_step(timedelta(seconds=60)) == timedelta(seconds=6)
    assert renew_step(timedelta(seconds=300)) == timedelta(seconds=30)
    assert renew_step(timedelta(hours=8)) == timedelta(seconds=60)  # at most a minute


def test_an_active_user_on_the_shortest_timeout_stays_signed_in() -> None:
    """`--console-session 60`, a request every 5 s for 10 minutes: the stored expiry
    is always ahead of the clock, and never falls more than a step behind the last
    request's (with a step as long as the timeout it ran out 60 s after sign-in)."""
    idle = timedelta(seconds=60)
    stored = T0 + idle  # written at sign-in
    for n in range(1, 121):
        now = T0 + timedelta(seconds=5 * n)
        assert stored > now, f"signed out {5 * n} s after sign-in"
        if needs_write(stored, now + idle, idle):
            stored = now + idle
        assert now + idle - stored < renew_step(idle)


async def test_a_short_session_is_renewed_by_requests_within_its_timeout(
    sessions: tuple[SessionService, Clock],
) -> None:
    service, clock = sessions
    await service.set("id", b"{}", 60)
    for s in range(10, 181, 10):  # a request every 10 s for 3 minutes
        clock.now = T0 + timedelta(seconds=s)
        assert await service.get("id") == b"{}", f"expired {s} s after sign-in"
        await service.set("id", b"{}", 60)
