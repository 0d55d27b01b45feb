"""Alembic environment: runs migrations over the async drivers Vigil uses
(aiosqlite, asyncpg), in batch mode on SQLite so ALTERs work there too."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

# Each domain maps its tables on the one Base: importing them all fills its metadata.
import vigil.platform.control.access.tables
import vigil.platform.control.alerts.tables
import vigil.platform.control.audit.tables
import vigil.platform.control.deployments.tables
import vigil.platform.control.replicas.tables
import vigil.platform.control.versions.tables
import vigil.platform.control.webhooks.tables  # noqa: F401
from vigil.platform.control.db import Base

target_metadata = Base.metadata


# Gateways started together (two replicas, and the migration Job) all migrate: on
# PostgreSQL one at a time, under this transaction-scoped advisory lock, so the later
# ones find the schema at head instead of creating the same tables again.
MIGRATION_LOCK_KEY = 0x76_69_67_69_6C_6D_67  # "vigilmg"


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
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
