"""Alembic environment: runs migrations over the async drivers Vigil uses
(aiosqlite, asyncpg), in batch mode on SQLite so ALTERs work there too."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from vigil.platform.control.tables import Base

target_metadata = Base.metadata


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_online(url: str) -> None:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_configure_and_run)
    finally:
        await engine.dispose()


def main() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    assert url, "vigil.platform.control.migrate sets sqlalchemy.url"
    if context.is_offline_mode():
        context.configure(url=url, target_metadata=target_metadata, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
    else:
        asyncio.run(_run_online(url))


main()
