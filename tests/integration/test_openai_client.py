"""The official `openai` Python client against a real `vigil serve`: what it sends, Vigil
accepts; what Vigil answers, it parses."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI

pytestmark = pytest.mark.slow

LLM = "smollm2-135m-instruct"
EMBEDDER = "all-minilm-l6-v2"
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
# Its greedy answer is "Yes." (3 tokens, then EOS): short enough to see min_tokens and
# ignore_eos at work.
YES_OR_NO = [{"role": "user", "content": "Reply with one word: yes or no?"}]


@pytest.fixture(scope="module")
def client(vigil_server) -> Iterator[OpenAI]:  # type: ignore[no-untyped-def]
    # Open mode: a key that is not a Vigil key (clients insist on one) counts as none.
    # No retries, so that a 429 or 5xx shows up as itself.
    with OpenAI(
        base_url=f"{vigil_server.base_url}/v1", api_key="EMPTY", max_retries=0, timeout=120
    ) as c:
        yield c


def chat(client: OpenAI, messages: Any = FRANCE, **kwargs: Any) -> Any:
    return client.chat.completions.create(model=LLM, messages=messages, **kwargs)


def test_chat_completion(client: OpenAI) -> None:
    out = chat(client, temperature=0, max_tokens=20)
    assert out.object == "chat.completion" and out.model == LLM
    assert out.id.startswith("chatcmpl-")
    (choice,) = out.choices
    assert choice.message.role == "assistant" and "Paris" in (choice.message.content or "")
    assert choice.finish_reason == "stop"
    usage = out.usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_streamed_chat_ends_with_finish_reason_then_a_usage_chunk(client: OpenAI) -> None:
    usage = {"include_usage": True}
    chunks = list(chat(client, temperature=0, max_tokens=20, stream=True, stream_options=usage))
    *with_choices, last = chunks
    assert last.choices == [] and last.usage is not None
    assert all(c.choices and c.usage is None for c in with_choices)
    assert with_choices[0].choices[0].delta.role == "assistant"
    finish = [c.choices[0].finish_reason for c in with_choices]
    assert finish[-1] == "stop" and set(finish[:-1]) == {None}
    text = "".join(c.choices[0].delta.content or "" for c in with_choices)
    assert "Paris" in text
    assert {c.id for c in chunks} == {chunks[0].id}
    whole = chat(client, temperature=0, max_tokens=20)
    assert text == whole.choices[0].message.content and last.usage == whole.usage


def test_stream_without_include_usage_has_no_usage_chunk(client: OpenAI) -> None:
    chunks = list(chat(client, temperature=0, max_tokens=4, stream=True))
    assert all(c.usage is None and c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_completion_streamed_and_not_agree(client: OpenAI) -> None:
    kwargs: dict[str, Any] = {"prompt": "The three primary colours are", "temperature": 0}
    whole = client.completions.create(model=LLM, max_tokens=8, **kwargs)
    assert whole.object == "text_completion" and whole.id.startswith("cmpl-")
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == 8
    chunks = list(
        client.completions.create(
            model=LLM, max_tokens=8, stream=True, stream_options={"include_usage": True}, **kwargs
        )
    )
    *with_choices, last = chunks
    assert last.choices == [] and last.usage == whole.usage
    assert "".join(c.choices[0].text for c in with_choices) == whole.choices[0].text
    assert with_choices[-1].choices[0].finish_reason == "length"


def test_stop_string_ends_the_completion_before_it(client: OpenAI) -> None:
    out = client.completions.create(
        model=LLM, prompt="1, 2, 3, 4,", temperature=0, max_tokens=20, stop=[" 7"]
    )
    choice = out.choices[0]
    assert choice.finish_reason == "stop"
    assert "6" in choice.text and "7" not in choice.text


def test_seed_makes_sampling_reproducible_at_any_temperature(client: OpenAI) -> None:
    def sampled(seed: int) -> str:
        out = chat(client, temperature=1.3, top_p=0.9, seed=seed, max_tokens=12)
        return str(out.choices[0].message.content)

    assert sampled(1234) == sampled(1234)
    assert len({sampled(seed) for seed in (1, 2, 3)}) > 1  # and it really samples


def test_max_tokens_and_max_completion_tokens_cap_the_answer(client: OpenAI) -> None:
    def num_tokens(**kwargs: Any) -> tuple[int, str | None]:
        out = chat(client, temperature=0, n=1, **kwargs)
        return out.usage.completion_tokens, out.choices[0].finish_reason

    assert num_tokens(max_tokens=5) == (5, "length")
    assert num_tokens(max_completion_tokens=3) == (3, "length")
    # The newer name wins, as with OpenAI.
    assert num_tokens(max_tokens=10, max_completion_tokens=4) == (4, "length")


def test_ignore_eos_and_min_tokens_via_extra_body(client: OpenAI) -> None:
    def usage(**extra: Any) -> tuple[int, str | None]:
        out = chat(client, YES_OR_NO, temperature=0, max_tokens=30, extra_body=extra or None)
        return out.usage.completion_tokens, out.choices[0].finish_reason

    natural, finish = usage()
    assert natural < 10 and finish == "stop"
    assert usage(ignore_eos=True) == (30, "length")
    at_least, _ = usage(min_tokens=12)
    assert at_least >= 12


def test_embeddings_single_and_list_in_both_encodings(client: OpenAI) -> None:
    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The sky is blue."]
    # Without encoding_format the client asks for base64 and decodes it itself.
    listed = client.embeddings.create(model=EMBEDDER, input=texts)
    assert [d.index for d in listed.data] == [0, 1, 2] and listed.model == EMBEDDER
    vectors = [d.embedding for d in listed.data]
    assert all(len(v) == 384 for v in vectors)
    assert all(math.isclose(math.hypot(*v), 1.0, rel_tol=1e-4) for v in vectors)
    assert listed.usage.prompt_tokens > 0
    floats = client.embeddings.create(model=EMBEDDER, input=texts, encoding_format="float")
    assert [d.embedding for d in floats.data] == vectors  # float32 both ways: exact
    single = client.embeddings.create(model=EMBEDDER, input=texts[2], encoding_format="float")
    (only,) = single.data
    assert max(abs(a - b) for a, b in zip(only.embedding, vectors[2], strict=True)) < 1e-5


def test_models_list_and_retrieve(client: OpenAI) -> None:
    models = client.models.list()
    assert {m.id for m in models} == {LLM, EMBEDDER}
    assert all(m.object == "model" and m.owned_by == "vigil" for m in models)
    assert client.models.retrieve(LLM).id == LLM
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("gpt-9")
    assert LLM in info.value.message


def test_unknown_model_is_not_found(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=FRANCE)
    assert info.value.code == "model_not_found" and info.value.param == "model"


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("n", {"n": 2}),
        ("logprobs", {"logprobs": True}),
        ("presence_penalty", {"presence_penalty": 0.5}),
        ("frequency_penalty", {"frequency_penalty": 0.5}),
        ("best_of", {"extra_body": {"best_of": 2}}),
    ],
)
def test_unsupported_field_is_a_400_naming_it(
    client: OpenAI, field: str, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, max_tokens=2, **kwargs)
    error = info.value
    assert error.status_code == 400 and error.param == field
    assert field in error.message


def test_raw_response_headers_name_the_request_and_the_model_version(client: OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=LLM, messages=FRANCE, temperature=0, max_tokens=2
    )
    out = raw.parse()
    assert raw.headers["x-request-id"] == out.id
    model, _, version = raw.headers["x-vigil-served-by"].partition("/")
    assert model == LLM and version
    with client.chat.completions.with_streaming_response.create(
        model=LLM, messages=FRANCE, temperature=0, max_tokens=2, stream=True
    ) as streamed:
        request_id = streamed.headers["x-request-id"]
        assert {chunk.id for chunk in streamed.parse()} == {request_id}
