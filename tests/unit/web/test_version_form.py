"""The version form sets every default a version can carry (the admin API's params), with
the bundled model's values as placeholders; a version registered through it keeps its
output cap when it serves (the real bundled model behind a real gateway)."""

from __future__ import annotations

import asyncio
import html
from pathlib import Path
from typing import Any

import httpx
import pytest
from consoles import PASSWORD, Console
from fakes import FakeWorkers, gateway_client, report_loaded, tiny_engine

from vigil.engine.bundled import SMOLLM2
from vigil.platform.control.access.records import Role
from vigil.platform.control.deployments.records import DeploymentDraft, VersionKey
from vigil.platform.control.specs import bundled_version

BUNDLED = f"bundled:{SMOLLM2}"


async def served(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    """The answer once the fake worker's next heartbeat has the new version ready (503
    model_loading until then), within a generous bound."""
    for _ in range(600):
        r = await client.post("/v1/chat/completions", json=body)
        if r.status_code != 503:
            return r
        await asyncio.sleep(0.1)
    raise AssertionError(f"never served: {r.text}")


def text_of(answer: Any) -> str:
    return html.unescape(answer.text)


async def test_the_form_offers_every_default_with_the_bundled_values(console: Console) -> None:
    await console.sign_in("otto")
    page = (await console.get("/console/versions")).text
    for field in ("max_tokens", "temperature", "top_p", "top_k", "stop", "dtype"):
        assert f'name="{field}"' in page, field
    assert 'name="quantization"' in page and 'name="tool_parser"' in page
    assert 'name="max_tokens" type="number" step="1" min="1" placeholder="256"' in page
    assert 'placeholder="0.2"' in page and 'placeholder="0.9"' in page
    assert "<option>int4</option>" in page and "<option>hermes</option>" in page


async def test_every_default_set_in_the_form_is_kept_with_the_version(console: Console) -> None:
    await console.sign_in("otto")
    form = {
        "model": SMOLLM2,
        "version": "full",
        "artifact": BUNDLED,
        "max_tokens": "40",
        "temperature": "0.3",
        "top_p": "0.8",
        "top_k": "20",
        "stop": "\nUser:\r\n###\n",
        "dtype": "float32",
        "quantization": "none",
        "tool_parser": "hermes",
    }
    answer = await console.post("/console/versions", form)
    assert answer.status_code == 200, answer.text
    record = await console.services.plane.versions.get_version(SMOLLM2, "full")
    assert dict(record.ref.params) == {
        "max_tokens": 40,
        "temperature": 0.3,
        "top_p": 0.8,
        "top_k": 20,
        "stop": ("User:", "###"),
        "dtype": "float32",
        "quantization": "none",
        "tool_parser": "hermes",
    }


async def test_bad_defaults_are_a_400_that_says_what_to_fix(console: Console) -> None:
    await console.sign_in("otto")
    base = {"model": SMOLLM2, "version": "bad", "artifact": BUNDLED}
    for field, value, message in [
        ("max_tokens", "0", "'max_tokens' must be"),
        ("quantization", "int3", "'quantization' must be one of none, int4, int8, auto"),
        ("tool_parser", "xml", "'tool_parser' must be one of hermes, llama3_json"),
        ("stop", "\n".join(f"s{i}" for i in range(17)), "'stop' takes at most 16 strings"),
    ]:
        answer = await console.post("/console/versions", {**base, field: value})
        assert answer.status_code == 400 and message in text_of(answer), (field, answer.text)
    versions = await console.services.plane.versions.list_versions(SMOLLM2)
    assert [v.ref.version for v in versions] == [bundled_version(SMOLLM2).version]


@pytest.mark.slow  # generates with the bundled model
async def test_a_version_registered_in_the_console_with_max_tokens_stops_there(
    tmp_path: Path, smollm2: Any, smollm2_tokenizer: Any
) -> None:
    """The cap the form set holds through the API for a request that sets none and never
    stops by itself (ignore_eos), where the version's would run on to the context."""
    capped = f"{SMOLLM2}@capped"
    engine = tiny_engine(smollm2)
    engine.start()
    workers = FakeWorkers()
    workers.add("w1", {bundled_version(SMOLLM2).key: engine, capped: engine})
    try:
        async with gateway_client(tmp_path, workers, smollm2_tokenizer) as (gateway, client):
            plane = gateway.services.plane
            await plane.users.create("otto", PASSWORD, Role.OPERATOR, actor="test")
            console = Console(client, gateway.services)  # type: ignore[arg-type]
            await console.sign_in("otto")
            form = {"model": SMOLLM2, "version": "capped", "artifact": BUNDLED}
            answer = await console.post("/console/versions", {**form, "max_tokens": "7"})
            assert answer.status_code == 200, answer.text
            await report_loaded(plane, SMOLLM2, "capped")
            await plane.deployments.create(
                "capped", DeploymentDraft(VersionKey(SMOLLM2, "capped")), actor="test"
            )
            ask = {
                "messages": [{"role": "user", "content": "Tell me a long story."}],
                "ignore_eos": True,
                "temperature": 0,
            }
            r = await served(client, {**ask, "model": "capped"})
            assert r.status_code == 200, r.text
            assert r.headers["x-vigil-served-by"] == f"{SMOLLM2}/capped"
            assert r.json()["usage"]["completion_tokens"] == 7
            # A request's own cap still wins over the version's.
            own = {**ask, "model": "capped", "max_tokens": 12}
            r = await client.post("/v1/chat/completions", json=own)
            assert r.json()["usage"]["completion_tokens"] == 12
    finally:
        engine.stop()
