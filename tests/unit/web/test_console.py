"""The console's overview from the real application over SQLite, with no worker: the
model versions table is drawn from the versions domain's records."""

from __future__ import annotations

import re

from consoles import Console

from vigil.engine.bundled import MINILM, SMOLLM2
from vigil.platform.control.specs import bundled_version


async def test_overview_lists_the_registered_versions(console: Console) -> None:
    response = await console.get("/console/")
    assert response.status_code == 200
    table = response.text[response.text.index('<table id="model-versions">') :]
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td>", table)
    assert rows == [
        (MINILM, bundled_version(MINILM).version, "embed", "hf"),
        (SMOLLM2, bundled_version(SMOLLM2).version, "generate", "gguf"),
    ]
    assert table.count('<span class="badge badge-registered">registered</span>') == 2


async def test_the_versions_table_redraws_with_each_versions_state(console: Console) -> None:
    plane = console.services.plane
    await plane.versions.register_version(SMOLLM2, "old", f"bundled:{SMOLLM2}", actor="test")
    await plane.versions.retire_version(SMOLLM2, "old", actor="test")
    table = (await console.get("/console/overview/versions")).text
    assert 'hx-trigger="every 5s"' in table
    assert re.search(r"<td>old</td>.*?badge-retired\">retired</span>", table, re.S)
