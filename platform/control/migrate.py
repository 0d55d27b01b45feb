"""Run the Alembic migrations shipped inside the package (no alembic.ini needed).

Called from synchronous code only (the CLI, before a server starts): the
environment runs its own event loop for the async drivers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

import vigil.migrations


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(vigil.migrations.__file__).parent))
    # '%' would be read as interpolation by configparser (passwords may contain it).
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def migrate(database_url: str, revision: str = "head") -> None:
    """Move the schema to `revision`, up or down ('head' by default, 'base' empties it)."""
    cfg = alembic_config(database_url)
    current = current_revision(database_url)
    if revision == "base" or _lies_below(cfg, revision, current):
        command.downgrade(cfg, revision)
    else:
        command.upgrade(cfg, revision)


def current_revision(database_url: str) -> str | None:
    async def read() -> str | None:
        engine = create_async_engine(database_url, poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(
                    lambda sync: MigrationContext.configure(sync).get_current_revision()
                )
        finally:
            await engine.dispose()

    return asyncio.run(read())


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None, "the package ships no migrations"
    return head


def _lies_below(cfg: Config, revision: str, current: str | None) -> bool:
    if current is None or revision in ("head", current):
        return False
    script = ScriptDirectory.from_config(cfg)
    below = {rev.revision for rev in script.iterate_revisions(current, "base")}
    return revision in below
