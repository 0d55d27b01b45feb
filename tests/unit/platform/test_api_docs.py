"""The API docs at /schema load nothing from the internet: their scripts and styles are
served by Vigil itself, so they work offline."""

from __future__ import annotations

import re

from fakes import FakeWorkers, gateway_client


async def test_the_api_docs_page_and_its_assets_come_from_vigil(
    tmp_path, smollm2_tokenizer
) -> None:  # type: ignore[no-untyped-def]
    async with gateway_client(tmp_path, FakeWorkers(), smollm2_tokenizer) as (_, client):
        page = await client.get("/schema")
        assert page.status_code == 200 and "SwaggerUIBundle" in page.text
        assert not re.search(r"(src|href)=['\"]https?://", page.text), page.text
        for asset in re.findall(r"(?:src|href)=['\"](/static/[^'\"]+)", page.text):
            assert (await client.get(asset)).status_code == 200, asset
        assert "/static/vendor/swagger-ui-bundle.js" in page.text
        spec = await client.get("/schema/openapi.json")
        assert spec.status_code == 200 and spec.json()["info"]["title"] == "Vigil"
