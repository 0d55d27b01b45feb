"""Bad input gets a 4xx with an OpenAI-style error body that says what to fix, never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

LLM = "smollm2-135m-instruct"
EMBEDDER = "all-minilm-l6-v2"
USER = [{"role": "user", "content": "hi"}]


def post(server: Any, path: str, body: Any = None, content: bytes | None = None) -> httpx.Response:
    headers = {"content-type": "application/json"}
    if content is not None:
        return httpx.post(f"{server.base_url}{path}", content=content, headers=headers, timeout=60)
    return httpx.post(f"{server.base_url}{path}", json=body, timeout=60)


def assert_error(
    r: httpx.Response,
    status: int,
    *,
    param: str | None = None,
    code: str | None = None,
    mentions: str | None = None,
) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and len(error["message"]) > 10
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    if mentions is not None:
        assert mentions in error["message"], error["message"]
    return dict(error)


def test_malformed_json(vigil_server) -> None:
    r = post(vigil_server, "/v1/chat/completions", content=b'{"model": "x", "messages": [')
    error = assert_error(r, 400, mentions="JSON")
    assert error["type"] == "invalid_request_error"


def test_body_that_is_not_an_object(vigil_server) -> None:
    assert_error(post(vigil_server, "/v1/chat/completions", ["not", "an", "object"]), 400)


def test_empty_body(vigil_server) -> None:
    r = post(vigil_server, "/v1/chat/completions", content=b"")
    assert_error(r, 400, mentions="empty")


def test_body_over_the_size_limit(vigil_server) -> None:
    texts = ["word " * 2000] * 1100  # 11 MB, over Litestar's 10 MB
    r = post(vigil_server, "/v1/embeddings", {"model": EMBEDDER, "input": texts})
    assert_error(r, 413, mentions="larger")


def test_missing_messages(vigil_server) -> None:
    r = post(vigil_server, "/v1/chat/completions", {"model": LLM})
    assert_error(r, 400, param="messages", mentions="messages")


def test_empty_messages(vigil_server) -> None:
    r = post(vigil_server, "/v1/chat/completions", {"model": LLM, "messages": []})
    assert_error(r, 400, param="messages")


def test_message_with_unknown_role(vigil_server) -> None:
    r = post(
        vigil_server,
        "/v1/chat/completions",
        {"model": LLM, "messages": [{"role": "wizard", "content": "hi"}]},
    )
    assert_error(r, 400, param="messages[0].role")


def test_messages_of_the_wrong_type(vigil_server) -> None:
    r = post(vigil_server, "/v1/chat/completions", {"model": LLM, "messages": "hi"})
    assert_error(r, 400, param="messages")


def test_temperature_of_the_wrong_type(vigil_server) -> None:
    r = post(
        vigil_server, "/v1/chat/completions", {"model": LLM, "messages": USER, "temperature": "hot"}
    )
    assert_error(r, 400, param="temperature")


def test_unknown_model_is_404(vigil_server) -> None:
    r = post(vigil_server, "/v1/chat/completions", {"model": "gpt-9", "messages": USER})
    assert_error(r, 404, param="model", code="model_not_found", mentions=LLM)


def test_embedding_model_on_chat_endpoint(vigil_server) -> None:
    r = post(vigil_server, "/v1/chat/completions", {"model": EMBEDDER, "messages": USER})
    assert_error(r, 400, param="model", mentions="/v1/embeddings")


@pytest.mark.parametrize("value", [0, -5])
def test_max_tokens_below_one(vigil_server, value: int) -> None:
    r = post(
        vigil_server, "/v1/chat/completions", {"model": LLM, "messages": USER, "max_tokens": value}
    )
    assert_error(r, 400, param="max_tokens")


def test_max_tokens_above_the_context(vigil_server) -> None:
    r = post(
        vigil_server,
        "/v1/chat/completions",
        {"model": LLM, "messages": USER, "max_tokens": 100_000},
    )
    assert_error(r, 400, param="max_tokens", code="context_length_exceeded", mentions="8192")


def test_negative_temperature(vigil_server) -> None:
    r = post(
        vigil_server, "/v1/chat/completions", {"model": LLM, "messages": USER, "temperature": -0.5}
    )
    assert_error(r, 400, param="temperature")


def test_top_p_out_of_range(vigil_server) -> None:
    r = post(vigil_server, "/v1/completions", {"model": LLM, "prompt": "hi", "top_p": 1.5})
    assert_error(r, 400, param="top_p")


def test_prompt_longer_than_the_context(vigil_server) -> None:
    r = post(
        vigil_server, "/v1/completions", {"model": LLM, "prompt": "hello " * 9000, "max_tokens": 1}
    )
    assert_error(
        r, 400, param="prompt", code="context_length_exceeded", mentions="maximum context length"
    )


def test_chat_longer_than_the_context(vigil_server) -> None:
    r = post(
        vigil_server,
        "/v1/chat/completions",
        {"model": LLM, "messages": [{"role": "user", "content": "hello " * 9000}]},
    )
    assert_error(r, 400, param="messages", code="context_length_exceeded")


def test_token_ids_outside_the_vocabulary(vigil_server) -> None:
    r = post(vigil_server, "/v1/completions", {"model": LLM, "prompt": [1, 2, 10_000_000]})
    assert_error(r, 400, param="prompt", mentions="vocabulary")


def test_unknown_field_is_named(vigil_server) -> None:
    r = post(
        vigil_server, "/v1/chat/completions", {"model": LLM, "messages": USER, "temprature": 0.5}
    )
    assert_error(r, 400, mentions="temprature")


def test_n_over_the_servers_bound(vigil_server) -> None:
    r = post(vigil_server, "/v1/chat/completions", {"model": LLM, "messages": USER, "n": 9})
    assert_error(r, 400, param="n", code="unsupported_parameter", mentions="at most 8")


def test_empty_stop_string(vigil_server) -> None:
    r = post(vigil_server, "/v1/chat/completions", {"model": LLM, "messages": USER, "stop": [""]})
    assert_error(r, 400, param="stop[0]")


def test_embedding_input_empty_list(vigil_server) -> None:
    r = post(vigil_server, "/v1/embeddings", {"model": EMBEDDER, "input": []})
    assert_error(r, 400, param="input")


def test_embedding_input_too_long(vigil_server) -> None:
    r = post(vigil_server, "/v1/embeddings", {"model": EMBEDDER, "input": ["short", "word " * 400]})
    assert_error(r, 400, param="input[1]", code="context_length_exceeded")


def test_chat_model_on_embeddings_endpoint(vigil_server) -> None:
    r = post(vigil_server, "/v1/embeddings", {"model": LLM, "input": "hi"})
    assert_error(r, 400, param="model", mentions="/v1/chat/completions")


def test_wrong_method(vigil_server) -> None:
    assert_error(httpx.get(f"{vigil_server.base_url}/v1/chat/completions"), 405)


def test_unknown_path(vigil_server) -> None:
    assert_error(httpx.get(f"{vigil_server.base_url}/v1/nothing-here"), 404)


def test_server_still_serves_after_bad_input(vigil_server) -> None:
    r = post(
        vigil_server,
        "/v1/chat/completions",
        {"model": LLM, "messages": USER, "max_tokens": 2, "temperature": 0},
    )
    assert r.status_code == 200
