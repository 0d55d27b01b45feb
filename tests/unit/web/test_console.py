"""The console's overview from the real application over SQLite, with no worker: the
model versions table is drawn from the versions domain's records."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from vigil.engine.bundled import MINILM, SMOLLM2
from vigil.platform.app import create_app
from vigil.platform.control.migrate import migrate
from vigil.platform.control.specs import bundled_version
from vigil.platform.services import build_services
from vigil.platform.settings import ServeSettings, serve_settings


@pytest.fixture
def settings(tmp_path: Path) -> ServeSettings:
    settings = serve_settings({"data_dir": str(tmp_path)}, env={})
    migrate(settings.resolved_database_url)
    return settings


@pytest.fixture
async def client(settings: ServeSettings) -> AsyncIterator[AsyncTestClient[Litestar]]:
    # The start-up seeds the bundled models; no worker ever reports on them.
    app = create_app(build_services(settings, "worker-token"))
    async with AsyncTestClient(app) as client:
        yield client


async def test_overview_lists_the_registered_versions(client: AsyncTestClient[Litestar]) -> None:
    response = await client.get("/console/")
    assert response.status_code == 200
    table = response.text[response.text.index('<table id="model-versions">') :]
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td>", table)
    assert rows == [
        (MINILM, bundled_version(MINILM).version, "embed", "hf"),
        (SMOLLM2, bundled_version(SMOLLM2).version, "generate", "gguf"),
    ]
    assert table.count('<span class="badge badge-registered">registered</span>') == 2
