"""Fixtures shared by the control-plane tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import asyncpg
import pytest

PG_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


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


@pytest.fixture(scope="session")
def tiny_lm(smollm2_tokenizer):  # type: ignore[no-untyped-def]
    """A random-weight two-layer Llama with SmolLM2's tokenizer and chat template."""
    from fakes import tiny_language_model

    return tiny_language_model(smollm2_tokenizer)
