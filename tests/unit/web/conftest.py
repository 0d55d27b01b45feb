"""The console over the real application and a SQLite control plane, with no worker:
one migrated database with a user of each role, copied for each test. Their passwords
are hashed with argon2 at its cheapest: a hash carries its own cost, so signing them in
takes a millisecond instead of 0.1 s (users a test creates get the gateway's own)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from argon2 import PasswordHasher
from consoles import PASSWORD, USERS, Console
from litestar.testing import AsyncTestClient

from vigil.platform.app import create_app
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.migrate import migrate
from vigil.platform.control.plane import ControlPlane
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.services import build_services
from vigil.platform.settings import ServeSettings


@pytest.fixture(scope="session")
def console_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("console-template") / "vigil.db"
    url = f"sqlite+aiosqlite:///{path}"
    migrate(url)

    async def users() -> None:
        engine = create_engine(url)
        try:
            cheap = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
            plane = ControlPlane(session_factory(engine), password_hasher=cheap)
            # Seeded here once: seeding computes the bundled models' checksums.
            await plane.seed_bundled(list(ServeSettings().models))
            for name, role in USERS.items():
                await plane.users.create(name, PASSWORD, role, actor="test")
        finally:
            await engine.dispose()

    asyncio.run(users())
    return path


@pytest.fixture
def make_console(
    console_db: Path, tmp_path: Path, smollm2_tokenizer: Any
) -> Callable[..., contextlib.AbstractAsyncContextManager[Console]]:
    shutil.copy(console_db, tmp_path / "vigil.db")

    @contextlib.asynccontextmanager
    async def make(**settings: Any) -> AsyncIterator[Console]:
        serve = ServeSettings(data_dir=tmp_path, **{"auth": "open", **settings})
        tokenizers = TokenizerCache(lambda _: smollm2_tokenizer)  # read once a session
        services = build_services(serve, "worker-token", tokenizers=tokenizers)
        await services.plane.declare(list(serve.models), serve.config_path)
        async with AsyncTestClient(create_app(services)) as client:
            client.follow_redirects = False
            yield Console(client, services)

    return make


@pytest.fixture
async def console(make_console: Any) -> AsyncIterator[Console]:
    async with make_console() as c:
        yield c
