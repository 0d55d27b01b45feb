"""The OpenAI-compatible API of a real `vigil serve`, over HTTP."""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

LLM = "smollm2-135m-instruct"
EMBEDDER = "all-minilm-l6-v2"


def chat_body(question: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": LLM,
        "messages": [{"role": "user", "content": question}],
        "temperature": 0,
        **extra,
    }


def read_sse(response: httpx.Response) -> list[Any]:
    """The JSON payloads of an SSE stream, with the final [DONE] as the string."""
    events: list[Any] = []
    for line in response.iter_lines():
        if not line.startswith("data: "):
            assert line == "" or line.startswith(":"), f"unexpected SSE line {line!r}"
            continue
        data = line.removeprefix("data: ")
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


def stream_chat(base_url: str, body: dict[str, Any]) -> list[Any]:
    with httpx.stream(
        "POST", f"{base_url}/v1/chat/completions", json={**body, "stream": True}, timeout=120
    ) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-request-id"].startswith("chatcmpl-")
        return read_sse(r)


def test_streamed_chat_answers_the_capital_of_france(vigil_server) -> None:
    events = stream_chat(
        vigil_server.base_url,
        chat_body("What is the capital of France?", stream_options={"include_usage": True}),
    )
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert "Paris" in text
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] == "stop" and all(f is None for f in finish[:-1])
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}


def test_stream_without_include_usage_sends_no_usage_chunk(vigil_server) -> None:
    events = stream_chat(vigil_server.base_url, chat_body("Say hi.", max_tokens=4))
    assert all("usage" not in e for e in events[:-1])


def test_streamed_text_equals_non_streamed_text(vigil_server) -> None:
    body = chat_body("Write one sentence about the sea, with an emoji.", max_tokens=40)
    r = httpx.post(f"{vigil_server.base_url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200
    whole = r.json()
    assert whole["object"] == "chat.completion"
    assert r.headers["x-request-id"] == whole["id"]
    events = stream_chat(vigil_server.base_url, body)
    streamed = "".join(
        c["choices"][0]["delta"].get("content", "") for c in events[:-1] if c["choices"]
    )
    assert streamed == whole["choices"][0]["message"]["content"]
    assert "\ufffd" not in streamed


def test_stop_string_ends_the_answer_before_it(vigil_server) -> None:
    body = chat_body("Count from 1 to 10, separated by commas.", max_tokens=40, stop=["5"])
    r = httpx.post(f"{vigil_server.base_url}/v1/chat/completions", json=body, timeout=120)
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert "5" not in choice["message"]["content"]
    assert "4" in choice["message"]["content"]


def test_max_tokens_finishes_with_length(vigil_server) -> None:
    body = {
        "model": LLM,
        "prompt": "Once upon a time",
        "max_tokens": 5,
        "temperature": 0,
        "ignore_eos": True,
    }
    r = httpx.post(f"{vigil_server.base_url}/v1/completions", json=body, timeout=120)
    assert r.status_code == 200
    out = r.json()
    assert out["object"] == "text_completion"
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"]["completion_tokens"] == 5


def test_streamed_completion_matches_non_streamed(vigil_server) -> None:
    body = {
        "model": LLM,
        "prompt": "The three primary colours are",
        "max_tokens": 12,
        "temperature": 0,
    }
    whole = httpx.post(f"{vigil_server.base_url}/v1/completions", json=body, timeout=120).json()
    with httpx.stream(
        "POST",
        f"{vigil_server.base_url}/v1/completions",
        json={**body, "stream": True},
        timeout=120,
    ) as r:
        events = read_sse(r)
    assert events[-1] == "[DONE]"
    streamed = "".join(e["choices"][0]["text"] for e in events[:-1])
    assert streamed == whole["choices"][0]["text"]


def test_seeded_sampling_is_reproducible(vigil_server) -> None:
    body = chat_body(
        "Invent a name for a cat.", temperature=1.0, top_p=0.95, seed=1234, max_tokens=12
    )
    url = f"{vigil_server.base_url}/v1/chat/completions"
    first = httpx.post(url, json=body, timeout=120).json()["choices"][0]["message"]["content"]
    second = httpx.post(url, json=body, timeout=120).json()["choices"][0]["message"]["content"]
    assert first == second


def test_concurrent_requests_get_their_own_greedy_answers(vigil_server) -> None:
    questions = [
        "What is 2+2?",
        "Name a colour.",
        "What is the capital of Italy?",
        "Say hello in French.",
    ]
    url = f"{vigil_server.base_url}/v1/chat/completions"

    def ask(q: str) -> str:
        r = httpx.post(url, json=chat_body(q, max_tokens=16), timeout=120)
        return str(r.json()["choices"][0]["message"]["content"])

    alone = [ask(q) for q in questions]
    with ThreadPoolExecutor(len(questions)) as pool:
        together = list(pool.map(ask, questions))
    # Greedy decoding of the same ids; the engine-level tests cover near-ties.
    assert together == alone


def test_embeddings_for_a_list_keep_order_and_are_normalised(vigil_server) -> None:
    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The sky is blue."]
    r = httpx.post(
        f"{vigil_server.base_url}/v1/embeddings",
        json={"model": EMBEDDER, "input": texts},
        timeout=60,
    )
    assert r.status_code == 200
    out = r.json()
    assert [d["index"] for d in out["data"]] == [0, 1, 2]
    vectors = [d["embedding"] for d in out["data"]]
    assert all(len(v) == 384 for v in vectors)
    assert all(math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, rel_tol=1e-4) for v in vectors)
    cos = sum(a * b for a, b in zip(vectors[0], vectors[1], strict=True))
    assert abs(cos - 0.755) < 0.005
    assert out["usage"]["prompt_tokens"] > 0
    single = httpx.post(
        f"{vigil_server.base_url}/v1/embeddings",
        json={"model": EMBEDDER, "input": texts[2]},
        timeout=60,
    ).json()
    assert len(single["data"]) == 1
    assert (
        max(abs(a - b) for a, b in zip(single["data"][0]["embedding"], vectors[2], strict=True))
        < 1e-5
    )


def test_models_lists_both_bundled_models(vigil_server) -> None:
    out = httpx.get(f"{vigil_server.base_url}/v1/models").json()
    assert out["object"] == "list"
    assert {m["id"] for m in out["data"]} == {LLM, EMBEDDER}


def test_health_and_readiness(vigil_server) -> None:
    assert httpx.get(f"{vigil_server.base_url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{vigil_server.base_url}/readyz")
    assert ready.status_code == 200
    versions = ready.json()["versions"]
    assert {key.split("@")[0] for key in versions} == {LLM, EMBEDDER}
    assert set(versions.values()) == {"ready"}


def test_openapi_schema_lists_the_api(vigil_server) -> None:
    schema = httpx.get(f"{vigil_server.base_url}/schema/openapi.json").json()
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"):
        assert path in schema["paths"]
