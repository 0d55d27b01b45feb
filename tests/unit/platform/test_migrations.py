"""Migrations go from empty to head and back, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from vigil.platform.cli import main
from vigil.platform.control.migrate import current_revision, head_revision, migrate
from vigil.platform.control.tables import Base

PG_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def tables(url: str) -> set[str]:
    async def read() -> set[str]:
        engine = create_async_engine(url, poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                names = await conn.run_sync(lambda c: inspect(c).get_table_names())
                return set(names) - {"alembic_version"}
        finally:
            await engine.dispose()

    return asyncio.run(read())


def round_trip(url: str) -> None:
    assert current_revision(url) is None
    migrate(url)
    assert current_revision(url) == head_revision()
    assert {"model_versions", "api_keys"} <= tables(url)
    migrate(url, "base")
    assert current_revision(url) is None
    assert tables(url) == set()
    migrate(url)  # and up again from empty
    assert current_revision(url) == head_revision()


def test_sqlite_upgrades_to_head_and_back_to_empty(tmp_path: Path) -> None:
    round_trip(f"sqlite+aiosqlite:///{tmp_path / 'vigil.db'}")


def test_migrate_command_takes_database_url_and_revision(tmp_path: Path, capsys) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
    assert main(["migrate", "--database-url", url]) == 0
    assert head_revision() in capsys.readouterr().out
    assert main(["migrate", "--database-url", url, "--revision", "base"]) == 0
    assert "base (empty)" in capsys.readouterr().out
    assert current_revision(url) is None


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh database on the local PostgreSQL server, dropped afterwards. A missing
    server is a failure, not a skip: production runs on PostgreSQL."""
    name = f"vigil_test_{uuid.uuid4().hex[:12]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.mark.postgres
def test_postgresql_upgrades_to_head_and_back_to_empty(postgres_url: str) -> None:
    round_trip(postgres_url)


def schema_drift(url: str) -> list[object]:
    """What autogenerate would still add or change: the migrations and tables.py agree
    when this is empty."""

    async def read() -> list[object]:
        engine = create_async_engine(url, poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(
                    lambda c: compare_metadata(
                        MigrationContext.configure(c, opts={"compare_type": True}),
                        Base.metadata,
                    )
                )
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_sqlite_schema_at_head_matches_the_tables(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'vigil.db'}"
    migrate(url)
    assert schema_drift(url) == []


@pytest.mark.postgres
def test_postgresql_schema_at_head_matches_the_tables(postgres_url: str) -> None:
    migrate(postgres_url)
    assert schema_drift(postgres_url) == []
