"""Console sessions: opaque bytes under a session id, until they expire.

The console's session middleware keeps what it needs (who signed in, when) here rather
than in the cookie, so that signing out ends a session on every gateway that shares the
database, and a restart signs nobody out. The id is a bearer secret like an API key:
only its SHA-256 is stored. An expired session reads as none and is deleted when next
touched, or by `purge_expired`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.platform.control.access.repository import SessionRepository
from vigil.platform.control.access.tables import ConsoleSession
from vigil.platform.control.db import Service, aware, utcnow

MAX_RENEW_STEP = timedelta(seconds=60)
RENEW_FRACTION = 0.1  # of the idle timeout: an active user keeps at least 90% of it


def renew_step(idle: timedelta) -> timedelta:
    """How far a session's expiry must move before it is written again: a tenth of its
    idle timeout, at most a minute. A step as long as the timeout itself would let a
    session expire while its user is active (a 60 s timeout, renewed every 60 s, ended
    60 s after sign-in)."""
    return min(MAX_RENEW_STEP, idle * RENEW_FRACTION)


def needs_write(stored_expires_at: datetime, new_expires_at: datetime, idle: timedelta) -> bool:
    """Whether an unchanged session's new expiry is worth a write: it moves the stored
    one by a renewal step or more. Skipped writes cost the session at most one step
    of its idle time."""
    return new_expires_at - stored_expires_at >= renew_step(idle)


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class SessionService(Service):
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        super().__init__(sessions)
        self.clock = clock  # tests move it to expire sessions

    async def get(self, session_id: str, renew_for_s: int | None = None) -> bytes | None:
        """The session's data, unless there is none or it has expired; `renew_for_s`
        moves its expiry that far from now."""
        now = self.clock()
        async with self._sessions.begin() as session:
            repo = SessionRepository(session)
            row = await repo.get(_hash(session_id))
            if row is None:
                return None
            if aware(row.expires_at) <= now:
                await repo.delete(row)
                return None
            if renew_for_s is not None:
                row.expires_at = now + timedelta(seconds=renew_for_s)
            return row.data

    async def set(self, session_id: str, data: bytes, expires_in_s: int) -> None:
        """Store the data until `expires_in_s` from now. The middleware calls this after
        every request; a session whose data is unchanged and whose expiry would move by
        less than `renew_step` is not written again (a page polling every 2 s would
        otherwise write its row every 2 s)."""
        idle = timedelta(seconds=expires_in_s)
        expires_at = self.clock() + idle
        async with self._sessions.begin() as session:
            repo = SessionRepository(session)
            row = await repo.get(_hash(session_id))
            if row is None:
                repo.add(
                    ConsoleSession(key_hash=_hash(session_id), data=data, expires_at=expires_at)
                )
            elif row.data != data or needs_write(aware(row.expires_at), expires_at, idle):
                row.data, row.expires_at = data, expires_at

    async def delete(self, session_id: str) -> None:
        async with self._sessions.begin() as session:
            await SessionRepository(session).delete_key(_hash(session_id))

    async def delete_all(self) -> None:
        async with self._sessions.begin() as session:
            await SessionRepository(session).delete_all()

    async def expires_in_s(self, session_id: str) -> int | None:
        """Seconds the session has left; None when there is none."""
        async with self._sessions() as session:
            row = await SessionRepository(session).get(_hash(session_id))
        if row is None:
            return None
        left_s = (aware(row.expires_at) - self.clock()).total_seconds()
        return int(left_s) if left_s > 0 else None

    async def purge_expired(self) -> int:
        """Delete every expired session; how many there were."""
        async with self._sessions.begin() as session:
            return await SessionRepository(session).delete_expired(self.clock())
