"""The control plane's database: the connection (SQLite by default, PostgreSQL in
production), the declarative base every domain maps its tables on, and the bases of
every domain's repositories and services.

Each domain keeps its own tables (`<domain>/tables.py`) on the one `Base`, so there is
one metadata for Alembic; `migrations/env.py` imports every domain's tables.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, TypeVar

from asyncpg import exceptions as pg_exc  # type: ignore[import-untyped]
from sqlalchemy import MetaData, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import DeclarativeBase, InstrumentedAttribute

# Every constraint gets a predictable name, so migrations can alter it on
# SQLite (batch mode) and PostgreSQL alike.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Awaited after every committed admin write (the gateway reloads its serving view).
OnChange = Callable[[], Awaitable[None]]


async def nothing_changed() -> None:
    """An OnChange for services used without listeners (the CLI)."""


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(ts: datetime) -> datetime:
    """SQLite hands back naive datetimes; every timestamp Vigil writes is UTC."""
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


# The database cannot be reached now (down, restarting, shutting down, a connection
# lost): asyncpg's word for it, or the network's. Retrying later may work.
_UNREACHABLE = (
    OSError,  # ConnectionRefusedError and the rest; TimeoutError too
    pg_exc.PostgresConnectionError,
    pg_exc.CannotConnectNowError,  # "the database system is starting up"
    pg_exc.AdminShutdownError,
    pg_exc.CrashShutdownError,
    pg_exc.InterfaceError,  # "connection is closed"
)


def database_unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the database is away for now, not that a query was wrong.
    SQLAlchemy wraps the driver's error (`orig`), and its asyncpg adapter wraps it once
    more (`__cause__`): the chain is followed."""
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return True
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, _UNREACHABLE):
            return True
        orig = getattr(seen, "orig", None)
        seen = orig if isinstance(orig, BaseException) else seen.__cause__
    return False


def create_engine(url: str) -> AsyncEngine:
    return create_async_engine(url, pool_pre_ping=not url.startswith("sqlite"))


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


RowT = TypeVar("RowT", bound=Base)


class Repository(Generic[RowT]):
    """The SQL of one table, inside the caller's session (and so its transaction)."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    def add(self, row: Base) -> None:
        self.session.add(row)

    async def delete(self, row: Base) -> None:
        await self.session.delete(row)


class NamedRepository(Repository[RowT]):
    """A table whose rows are found by a unique name, and listed in its order."""

    row_type: type[RowT]
    name_column: ClassVar[InstrumentedAttribute[Any]]

    async def get(self, name: str) -> RowT | None:
        stmt = select(self.row_type).where(self._name() == name)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def list(self) -> Sequence[RowT]:
        stmt = select(self.row_type).order_by(self._name())
        return (await self.session.execute(stmt)).scalars().all()

    @classmethod
    def _name(cls) -> InstrumentedAttribute[Any]:
        # Read from the class: through an instance, the ORM attribute (a descriptor)
        # would try to read a mapped row's value.
        return cls.name_column


class Service:
    """A domain's rules over its repositories. Each call opens its own session (one
    transaction per write) and, once a write has committed, awaits `on_change`."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], on_change: OnChange = nothing_changed
    ) -> None:
        self._sessions = sessions
        self._on_change = on_change
