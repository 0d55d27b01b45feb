"""How gateways that share one PostgreSQL hear of each other's admin writes.

Each gateway keeps what it serves from in memory (the serving view, the cached key
lookups); a change made through another gateway, or by `vigil keys` from a shell, must
reach it within about a second. Two paths, so that no single failure leaves it stale:

- PostgreSQL LISTEN/NOTIFY: the writer NOTIFYs channel `vigil_control` right after its
  write has committed (`announce`); every gateway LISTENs on a connection of its own,
  kept apart from the pool and opened again when it drops, and reloads when it hears
  another process (the payload names the writer, so a gateway skips its own writes,
  which it has already applied).
- A poll, every POLL_INTERVAL_S: the newest audit-log id, the change marker every admin
  write moves (each is audited in its own transaction). It catches a notice lost
  between a commit and a crash, or sent while the listening connection was down.

On SQLite there is one process, which applies its own writes at once: nothing to hear.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from vigil.platform.control.audit.tables import AuditEntry
from vigil.platform.control.db import OnChange

log = logging.getLogger(__name__)

CHANNEL = "vigil_control"
POLL_INTERVAL_S = 2.0
CONNECT_TIMEOUT_S = 5.0
PING_TIMEOUT_S = 3.0
RECONNECT_S = 1.0


def asyncpg_dsn(url: str) -> str | None:
    """The plain PostgreSQL DSN asyncpg takes, from a SQLAlchemy URL of any PostgreSQL
    driver; None for any other database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        return None
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


class ChangeFeed:
    def __init__(self, engine: AsyncEngine, poll_interval_s: float = POLL_INTERVAL_S) -> None:
        self._engine = engine
        self._dsn = asyncpg_dsn(engine.url.render_as_string(hide_password=False))
        self._poll_interval_s = poll_interval_s
        self.origin = uuid.uuid4().hex  # names this process's notices
        self.listening = False
        self._marker: int | None = None

    @property
    def shared(self) -> bool:
        """Whether other processes may write to this database (PostgreSQL)."""
        return self._dsn is not None

    async def announce(self) -> None:
        """Tell every gateway that an admin write has committed here. A notice that is
        lost (the database went away meanwhile) is caught by their poll."""
        if not self.shared:
            return
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    text("SELECT pg_notify(:channel, :origin)"),
                    {"channel": CHANNEL, "origin": self.origin},
                )
        except Exception:
            log.warning("could not announce a control-plane change; other gateways poll")

    async def run(self, on_change: OnChange) -> None:
        """Until cancelled: `on_change` after every change another process makes."""
        if not self.shared:
            return
        self._marker = await self._read_marker()
        while True:
            conn = await self._connect()
            if conn is None:
                await self._poll(on_change)
                await asyncio.sleep(RECONNECT_S)
                continue
            try:
                await self._listen(conn, on_change)
            except Exception as exc:  # lost, reset, or left mid-call by a timeout
                log.warning("control-plane notices lost (%r); listening again", exc)
            finally:
                self.listening = False
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(PING_TIMEOUT_S):
                        await conn.close()
                if not conn.is_closed():
                    conn.terminate()

    async def _connect(self) -> asyncpg.Connection | None:
        assert self._dsn is not None
        try:
            return await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT_S)
        except Exception as exc:
            log.warning("cannot listen for control-plane changes (%r); polling", exc)
            return None

    async def _listen(self, conn: asyncpg.Connection, on_change: OnChange) -> None:
        heard = asyncio.Event()

        def notice(_conn: object, _pid: int, _channel: str, origin: str) -> None:
            if origin != self.origin:
                heard.set()

        await conn.add_listener(CHANNEL, notice)
        self.listening = True
        log.info("listening for control-plane changes on channel %s", CHANNEL)
        await self._apply(on_change)  # anything written while nobody listened
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation
            # that lands as the awaited call completes, and this loop outlives its task.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_interval_s):
                    await heard.wait()
            if heard.is_set():
                heard.clear()
                await self._apply(on_change)
                continue
            # A quiet interval: is the connection still there, and did a notice go missing?
            async with asyncio.timeout(PING_TIMEOUT_S):
                await conn.execute("SELECT 1")
            await self._poll(on_change)

    async def _poll(self, on_change: OnChange) -> None:
        marker = await self._read_marker()
        if marker is not None and marker != self._marker:
            self._marker = marker
            await self._apply(on_change)

    async def _read_marker(self) -> int | None:
        try:
            async with self._engine.connect() as conn:
                newest = select(func.coalesce(func.max(AuditEntry.id), 0))
                return int((await conn.execute(newest)).scalar_one())
        except Exception as exc:  # the database is away: the next poll tries again
            log.debug("could not read the change marker: %s", exc)
            return None

    async def _apply(self, on_change: OnChange) -> None:
        marker = await self._read_marker()
        if marker is not None:
            self._marker = marker
        try:
            await on_change()
        except Exception:
            log.exception("applying a control-plane change failed")
