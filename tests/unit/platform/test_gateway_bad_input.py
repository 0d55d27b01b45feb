"""Bad and oversized input against the whole gateway (in process): JSON types taken as
sent, a clear 400 or 413 for what cannot be decoded or is too large, and a large prompt
that is tokenized without holding up anyone else."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fakes import FakeEmbedder, FakeWorkers, Gateway, running_gateway, tiny_engine

from vigil.engine.bundled import MINILM, SMOLLM2
from vigil.engine.tokenizer import Tokenizer
from vigil.platform.control.specs import bundled_version

KEY = bundled_version(SMOLLM2).key
MAX_BODY = 4 << 20
MAX_CHARS = 1_200_000
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
async def gateway(tmp_path_factory, tiny_lm, smollm2_tokenizer) -> AsyncIterator[Gateway]:  # type: ignore[no-untyped-def]
    engine = tiny_engine(tiny_lm)
    engine.start()
    workers = FakeWorkers()
    workers.add("w1", {KEY: engine, bundled_version(MINILM).key: FakeEmbedder()})
    try:
        async with running_gateway(
            tmp_path_factory.mktemp("gateway-bad-input"),
            workers,
            smollm2_tokenizer,
            max_request_bytes=MAX_BODY,
            max_prompt_chars=MAX_CHARS,
        ) as gw:
            yield gw
    finally:
        engine.stop()


@pytest.fixture
async def client(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as c:
        yield c


async def post(client: httpx.AsyncClient, body: Any = None, *, content: bytes | None = None,
               path: str = "/v1/chat/completions") -> dict[str, Any]:  # fmt: skip
    headers = {"content-type": "application/json"}
    r = await client.post(path, json=body, content=content, headers=headers)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    return {"status": r.status_code, **r.json()["error"]}


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_tokens", "3"), ("stream", "true"), ("temperature", "0.5"), ("seed", 1.5)],
)
async def test_json_types_are_taken_as_sent(
    client: httpx.AsyncClient, field: str, value: Any
) -> None:
    error = await post(client, {"model": SMOLLM2, "messages": USER, field: value})
    assert (error["status"], error["param"], error["code"]) == (400, field, "invalid_value")
    assert "Expected" in error["message"]


async def test_a_body_nested_very_deep_is_a_400(client: httpx.AsyncClient) -> None:
    deep = b'{"model": "x", "user": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    error = await post(client, content=deep)
    assert error["status"] == 400 and error["param"] == "user"
    deep_unknown = b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert (await post(client, content=deep_unknown))["status"] == 400


async def test_a_lone_surrogate_is_named_as_such(client: httpx.AsyncClient) -> None:
    body = (
        b'{"model": "%s", "messages": [{"role": "user", "content": "\\ud800"}]}' % SMOLLM2.encode()
    )
    error = await post(client, content=body)
    assert error["code"] == "invalid_json" and "surrogate" in error["message"]
    cut = await post(client, content=b'{"model": "x", "messages": [')
    assert cut["code"] == "invalid_json" and "line 1 column" in cut["message"]
    empty = await post(client, content=b"  ")
    assert "empty" in empty["message"]


@pytest.mark.parametrize(("stop", "param"), [("", "stop"), ([""], "stop[0]")])
async def test_an_empty_stop_string_is_refused_either_way(
    client: httpx.AsyncClient, stop: Any, param: str
) -> None:
    error = await post(client, {"model": SMOLLM2, "messages": USER, "stop": stop})
    assert (error["status"], error["param"]) == (400, param)


async def test_a_body_over_the_limit_is_a_413_naming_it(client: httpx.AsyncClient) -> None:
    error = await post(client, content=b'{"model": "' + b"x" * MAX_BODY + b'"}')
    assert error["status"] == 413 and str(MAX_BODY) in error["message"]


async def test_prompt_text_over_the_limit_is_refused_before_it_is_tokenized(
    client: httpx.AsyncClient, smollm2_tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[int] = []  # the length of each text the gateway tokenized
    encode = smollm2_tokenizer.encode

    def counted(text: str, max_tokens: int | None = None) -> list[int]:
        encoded.append(len(text))
        return encode(text, max_tokens)

    monkeypatch.setattr(smollm2_tokenizer, "encode", counted)
    half = "word " * (MAX_CHARS // 10 + 1)
    chat = [{"role": "system", "content": half}, {"role": "user", "content": half}]
    error = await post(client, {"model": SMOLLM2, "messages": chat})
    assert (error["param"], error["code"]) == ("messages", "prompt_too_large")
    assert str(MAX_CHARS) in error["message"]
    text = await post(
        client, {"model": SMOLLM2, "prompt": "x" * (MAX_CHARS + 1)}, path="/v1/completions"
    )
    assert (text["param"], text["code"]) == ("prompt", "prompt_too_large")
    assert encoded == []  # nothing was tokenized
    inputs = ["a b", "y" * (MAX_CHARS + 1)]
    embed = await post(client, {"model": MINILM, "input": inputs}, path="/v1/embeddings")
    assert (embed["param"], embed["code"]) == ("input[1]", "input_too_large")
    together = ["z" * (MAX_CHARS // 2 + 1)] * 2
    embed = await post(client, {"model": MINILM, "input": together}, path="/v1/embeddings")
    assert embed["param"] == "input"


async def test_a_one_megabyte_prompt_holds_up_neither_probes_nor_streams(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    big = ("The quick brown fox jumps over the lazy dog 12345. " * 20_000)[:1_000_000]
    body = {"model": SMOLLM2, "stream": True, "max_tokens": 3000, "ignore_eos": True,
            "messages": USER}  # fmt: skip
    gaps: list[float] = []

    async def stream() -> None:
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            last = time.monotonic()
            async for _ in r.aiter_lines():
                now = time.monotonic()
                gaps.append(now - last)
                last = now
                if tokenizing.done():
                    return

    async def probes() -> list[float]:
        latencies = []
        while not tokenizing.done():
            t0 = time.monotonic()
            assert (await client.get("/healthz")).status_code == 200
            latencies.append(time.monotonic() - t0)
            await asyncio.sleep(0.02)
        return latencies

    big_chat = {"model": SMOLLM2, "messages": [{"role": "user", "content": big}]}
    t0 = time.monotonic()
    tokenizing = asyncio.create_task(client.post("/v1/chat/completions", json=big_chat))
    streaming = asyncio.create_task(stream())
    latencies = await probes()
    took_s = time.monotonic() - t0
    refused = await tokenizing
    await streaming
    assert refused.status_code == 400  # tokenized, then over the context window
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    # The others were served all along. Held by it, a probe or a token would wait about
    # all of it: each waited a part of it instead, however busy the machine (a slower
    # machine makes both slower), and many were served meanwhile. The tokenizer's native
    # calls hold the GIL in stretches (one probe was seen to wait half of it), hence the
    # bound below the whole rather than a small share.
    assert len(latencies) >= 10, latencies
    assert max(latencies) < took_s * 0.75, (took_s, sorted(latencies)[-5:])
    assert len(gaps) > 10, gaps
    assert max(gaps) < took_s * 0.75, (took_s, sorted(gaps)[-5:])
