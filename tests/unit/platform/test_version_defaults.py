"""A request that sets no sampling and no output cap gets its version's defaults: the
bundled chat model's are what its model card recommends and a modest cap; a request's
own values win, and a default cap never pushes a request past the context window."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from fakes import FakeWorkers, Gateway, ScriptedEngine, gateway_client

from vigil.engine.bundled import SMOLLM2, SMOLLM2_DEFAULTS
from vigil.engine.request import RequestId
from vigil.platform.control.specs import bundled_version, version_params
from vigil.platform.gateway.params import GenerationParams, TextPrompt
from vigil.platform.gateway.prompt import sampling
from vigil.platform.wire.worker import SlotLimits

KEY = bundled_version(SMOLLM2).key
ASK = {"model": SMOLLM2, "messages": [{"role": "user", "content": "What is the capital?"}]}


@pytest.fixture
async def gateway(tmp_path, smollm2_tokenizer) -> AsyncIterator[Gateway]:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    workers.add("w1", {KEY: ScriptedEngine(auto_release=True)})
    async with gateway_client(tmp_path, workers, smollm2_tokenizer) as (gw, _):
        yield gw


def engine(gateway: Gateway) -> ScriptedEngine:
    found = gateway.workers.workers["w1"].engines[KEY]
    assert isinstance(found, ScriptedEngine)
    return found


async def test_a_request_that_sets_nothing_gets_the_bundled_versions_defaults(
    gateway: Gateway,
) -> None:
    defaults = dict(SMOLLM2_DEFAULTS)
    assert bundled_version(SMOLLM2).param("temperature") == 0.2
    client = gateway.client
    assert (await client.post("/v1/chat/completions", json=ASK)).status_code == 200
    own = {**ASK, "temperature": 0.9, "top_p": 0.5, "max_tokens": 1000}
    assert (await client.post("/v1/chat/completions", json=own)).status_code == 200
    first, second = (r.params for r in engine(gateway).arrived)
    assert (first.temperature, first.top_p, first.max_tokens) == (
        defaults["temperature"],
        defaults["top_p"],
        defaults["max_tokens"],
    )
    assert (second.temperature, second.top_p, second.max_tokens) == (0.9, 0.5, 1000)


async def test_a_default_cap_is_clamped_to_the_context_not_refused(
    tmp_path, smollm2_tokenizer
) -> None:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    small = SlotLimits(max_model_len=100, kv_capacity_tokens=100, max_num_seqs=4)
    workers.add("w1", {KEY: ScriptedEngine(auto_release=True)}, small)
    async with gateway_client(tmp_path, workers, smollm2_tokenizer) as (gateway, client):
        client = gateway.client
        r = await client.post("/v1/chat/completions", json=ASK)
        assert r.status_code == 200, r.text
        [request] = engine(gateway).arrived
    assert request.params.max_tokens == 100 - len(request.prompt_ids)


def test_a_versions_stop_strings_end_a_request_that_sets_none() -> None:
    version = replace(bundled_version(SMOLLM2), params=version_params({"stop": ["###", "\n\n"]}))
    silent = GenerationParams(RequestId("r1"), SMOLLM2, TextPrompt("hi"), "prompt")
    assert sampling(silent, version, 16).stop == ("###", "\n\n")
    own = replace(silent, stop=("END",))
    assert sampling(own, version, 16).stop == ("END",)
    assert hash(version)  # a list param is kept as a tuple: the record stays hashable
