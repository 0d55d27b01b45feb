"""Which gateway runs the loops that must run once however many gateways there are: the
SLO loop (alerts, shedding, fallback, canary rollback) and webhook delivery. Run by
two, an alert would be fired and sent twice.

On PostgreSQL the owner is whoever holds a session-level advisory lock (LOCK_KEY) on a
connection of its own, kept apart from the pool. Every CHECK_INTERVAL_S a gateway that
does not own tries to take the lock, and the owner pings its connection. The lock goes
with the session, so:
- an owner that dies (killed, its host gone) loses it as soon as the server sees the
  connection close, and another gateway takes it at its next try;
- an owner that can no longer reach the server stops acting when a ping fails or times
  out (within CHECK_INTERVAL_S + PING_TIMEOUT_S), and the server ends its silent session
  after IDLE_SESSION_TIMEOUT_MS (longer than that), releasing the lock to the others;
  no two gateways act at once unless a ping succeeds after the server let go.

On SQLite there is one process: it always owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import asyncpg  # type: ignore[import-untyped]

from vigil.platform.control.changes import asyncpg_dsn

log = logging.getLogger(__name__)

LOCK_KEY = 0x76_69_67_69_6C_6C_70  # "vigillp": one key for every Vigil loop
CHECK_INTERVAL_S = 1.0
CONNECT_TIMEOUT_S = 5.0
PING_TIMEOUT_S = 3.0
IDLE_SESSION_TIMEOUT_MS = 10_000  # the server's side: > CHECK_INTERVAL_S + PING_TIMEOUT_S

OnOwnerChange = Callable[[bool], Awaitable[None]]


class LoopOwnership:
    def __init__(self, url: str, check_interval_s: float = CHECK_INTERVAL_S) -> None:
        self._dsn = asyncpg_dsn(url)
        self._check_interval_s = check_interval_s
        self.is_owner = self._dsn is None
        self.num_changes = 0  # times this gateway took or lost ownership

    async def run(self, on_change: OnOwnerChange) -> None:
        """Until cancelled: take the loops when no one holds them, hold them while the
        connection lives; `on_change(owner)` after each change."""
        if self._dsn is None:
            return
        try:
            while True:
                conn = await self._connect()
                if conn is not None:
                    try:
                        await self._hold(conn, on_change)
                    except TimeoutError:
                        log.warning("loop ownership connection silent for %s s", PING_TIMEOUT_S)
                    except Exception as exc:  # lost, reset, or left mid-call by a timeout
                        log.warning("loop ownership connection lost: %r", exc)
                    finally:
                        await self._set(False, on_change)
                        await _close(conn)
                await asyncio.sleep(self._check_interval_s)
        finally:
            self.is_owner = False

    async def _connect(self) -> asyncpg.Connection | None:
        assert self._dsn is not None
        try:
            conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT_S)
            if conn.get_server_version().major >= 14:  # the setting is new in 14
                await conn.execute(f"SET idle_session_timeout = {IDLE_SESSION_TIMEOUT_MS}")
            return conn
        except Exception as exc:
            log.warning("cannot reach PostgreSQL for loop ownership: %r", exc)
            return None

    async def _hold(self, conn: asyncpg.Connection, on_change: OnOwnerChange) -> None:
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation
            # that lands as the call completes, and this loop then outlives its task.
            async with asyncio.timeout(PING_TIMEOUT_S):
                if self.is_owner:
                    await conn.execute("SELECT 1")
                    took = False
                else:
                    took = await conn.fetchval("SELECT pg_try_advisory_lock($1)", LOCK_KEY)
            if took:
                await self._set(True, on_change)
            await asyncio.sleep(self._check_interval_s)

    async def _set(self, owner: bool, on_change: OnOwnerChange) -> None:
        if owner == self.is_owner:
            return
        self.is_owner = owner
        self.num_changes += 1
        if owner:
            log.warning("this gateway now runs the SLO loop and webhook delivery")
        else:
            log.warning("this gateway no longer runs the SLO loop and webhook delivery")
        try:
            await on_change(owner)
        except Exception:
            log.exception("handing the loops over failed")


async def _close(conn: asyncpg.Connection) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(PING_TIMEOUT_S):
            await conn.close()
    if not conn.is_closed():
        conn.terminate()
