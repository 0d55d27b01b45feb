"""Migrations go from empty to head and back, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from vigil.platform.cli import main
from vigil.platform.control.migrate import current_revision, head_revision, migrate
from vigil.platform.control.tables import Base

TABLES = {
    "models",
    "model_versions",
    "api_keys",
    "deployments",
    "slos",
    "webhooks",
    "users",
    "audit_log",
    "replicas",
}


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
    assert tables(url) == TABLES
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


def run_sql(url: str, *statements: str) -> list[tuple[object, ...]]:
    """Run the statements in one transaction; the rows of the last one."""

    async def run() -> list[tuple[object, ...]]:
        engine = create_async_engine(url, poolclass=NullPool)
        try:
            async with engine.begin() as conn:
                result = None
                for sql in statements:
                    result = await conn.execute(text(sql))
                assert result is not None
                return [tuple(row) for row in result] if result.returns_rows else []
        finally:
            await engine.dispose()

    return asyncio.run(run())


def versions_recorded_before_0003_survive(url: str) -> None:
    """Rows the worker recorded at revision 0002 get a model each, their artifact from
    where they loaded, empty params; and they are still there after going back."""
    migrate(url, "0002")
    row = "'{}', '{}', 'generate', 'gguf', '{}', 'ready', '2026-12-01', '2026-12-01'"
    run_sql(
        url,
        "INSERT INTO model_versions (model, version, kind, format, source, status, "
        f"created_at, updated_at) VALUES ({row.format('smol', 'v1', '/m/smol-v1.gguf')})",
        "INSERT INTO model_versions (model, version, kind, format, source, status, "
        f"created_at, updated_at) VALUES ({row.format('smol', 'v2', '/m/smol-v2.gguf')})",
        "INSERT INTO model_versions (model, version, kind, format, source, status, "
        f"created_at, updated_at) VALUES ({row.format('other', 'v1', '/m/other.gguf')})",
    )
    migrate(url)
    models = run_sql(url, "SELECT id, name, kind FROM models ORDER BY name")
    assert [(name, kind) for _, name, kind in models] == [
        ("other", "generate"),
        ("smol", "generate"),
    ]
    ids = {name: model_id for model_id, name, _ in models}
    versions = run_sql(
        url,
        "SELECT model, version, model_id, artifact, params, checksum FROM model_versions "
        "ORDER BY model, version",
    )
    assert [(m, v, mid, a) for m, v, mid, a, _, _ in versions] == [
        ("other", "v1", ids["other"], "/m/other.gguf"),
        ("smol", "v1", ids["smol"], "/m/smol-v1.gguf"),
        ("smol", "v2", ids["smol"], "/m/smol-v2.gguf"),
    ]
    assert all(params in ("{}", {}) and checksum is None for *_, params, checksum in versions)
    migrate(url, "0002")
    back = run_sql(url, "SELECT model, version, source FROM model_versions ORDER BY source")
    assert back == [
        ("other", "v1", "/m/other.gguf"),
        ("smol", "v1", "/m/smol-v1.gguf"),
        ("smol", "v2", "/m/smol-v2.gguf"),
    ]


def test_sqlite_backfills_models_for_versions_recorded_earlier(tmp_path: Path) -> None:
    versions_recorded_before_0003_survive(f"sqlite+aiosqlite:///{tmp_path / 'vigil.db'}")


@pytest.mark.postgres
def test_postgresql_backfills_models_for_versions_recorded_earlier(postgres_url: str) -> None:
    versions_recorded_before_0003_survive(postgres_url)
