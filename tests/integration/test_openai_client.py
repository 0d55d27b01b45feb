"""The official `openai` Python client against a real `vigil serve`: what it sends, Vigil
accepts; what Vigil answers, it parses. Structured outputs, tools, logprobs and n as
applications use them, on the bundled SmolLM2: it does not choose tools well under
`auto`, so `auto` is checked for shape, and arguments where a grammar guarantees them."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any, Literal

import jsonschema
import openai
import pytest
from openai import OpenAI
from pydantic import BaseModel, Field
from schemas import USER_RECORD

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


def test_the_bundled_gguf_runs_int4_by_default_and_says_why(client: OpenAI) -> None:
    """No --quantization: `auto` serves the bundled Q4_1 file through the int4 path (its
    own 4-bit codes), and /v1/models says so beside OpenAI's fields."""
    model = client.models.retrieve(LLM)
    precision = (model.model_extra or {})["vigil"]["precision"]
    assert (precision["runs_as"], precision["quantization"]) == ("int4", "int4")
    assert precision["reason"].startswith("auto: ") and "Q4_1" in precision["reason"]


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


# ---- structured outputs, tools, logprobs and n, as applications use them ----

SCHEMA = USER_RECORD
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 16},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"enum": ["UTC", "CET", "JST"]}},
            "required": ["timezone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = {"get_weather": WEATHER_TOOL, "get_time": TIME_TOOL}
WEATHER_Q = [{"role": "user", "content": "What is the weather in Paris right now?"}]


class Person(BaseModel):
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=120)
    country: Literal["FR", "IT", "UK"]


def assert_calls_follow_their_tools(calls: Any) -> None:
    assert calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        schema = TOOLS[call.function.name]["function"]["parameters"]
        jsonschema.validate(json.loads(call.function.arguments), schema)


def test_parse_returns_the_pydantic_model(client: OpenAI) -> None:
    out = client.chat.completions.parse(
        model=LLM,
        messages=[{"role": "user", "content": "Invent a person from Rome."}],
        response_format=Person,
        temperature=0,
        max_tokens=60,
    )
    (choice,) = out.choices
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, Person)


def test_json_object_and_a_schema_with_enums_nested_objects_and_arrays(client: OpenAI) -> None:
    anything = chat(
        client,
        [{"role": "user", "content": "Describe a cat."}],
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=48,
        metadata={"team": "tests"},  # accepted, not stored
        store=False,
    )
    text = anything.choices[0].message.content
    if anything.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # cut by max_tokens: an object begun
        assert text.startswith("{")
    record = chat(
        client,
        [{"role": "user", "content": "Describe a user called Ada who lives in Paris as JSON."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "user", "schema": SCHEMA, "strict": True},
        },
        temperature=0,
        max_tokens=96,
    )
    assert record.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(record.choices[0].message.content), SCHEMA)


def test_a_schema_that_cannot_compile_is_a_400_saying_why(client: OpenAI) -> None:
    bad = {"type": "object", "properties": {"code": {"type": "string", "pattern": "(("}}}
    with pytest.raises(openai.BadRequestError) as info:
        chat(
            client,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": bad}},
        )
    assert info.value.param == "response_format" and "cannot be compiled" in info.value.message


def test_a_named_tool_is_called_with_arguments_of_its_schema_then_its_result_answered(
    client: OpenAI,
) -> None:
    tools = [WEATHER_TOOL, TIME_TOOL]
    named = {"type": "function", "function": {"name": "get_weather"}}
    out = chat(client, WEATHER_Q, tools=tools, tool_choice=named, temperature=0, max_tokens=48)
    (choice,) = out.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert_calls_follow_their_tools([call])
    # The round trip: the call and its result go back; the model answers from them.
    result = {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and sunny"}
    answer = chat(
        client, [*WEATHER_Q, choice.message, result], tools=tools, temperature=0, max_tokens=24
    )
    assert answer.usage.prompt_tokens > out.usage.prompt_tokens
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_required_streamed_is_assembled_by_the_clients_stream_helper(client: OpenAI) -> None:
    question = [{"role": "user", "content": "What time is it in Tokyo?"}]
    with client.chat.completions.stream(
        model=LLM,
        messages=question,
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice="required",
        temperature=0,
        max_tokens=96,
    ) as stream:
        deltas = [e for e in stream if e.type == "chunk"]
        final = stream.get_final_completion()
    (choice,) = final.choices
    assert choice.finish_reason == "tool_calls"
    assert_calls_follow_their_tools(choice.message.tool_calls)
    # OpenAI's shape: a call's first delta names it, its arguments come in fragments.
    calls = [c for e in deltas for ch in e.chunk.choices for c in ch.delta.tool_calls or []]
    first = calls[0]
    assert first.index == 0 and first.id and first.type == "function" and first.function.name
    assert len(calls) > 2 and all(c.id is None for c in calls[1:] if c.index == 0)
    whole = chat(
        client,
        question,
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice="required",
        temperature=0,
        max_tokens=96,
    )
    streamed = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls]
    assert streamed == [
        (c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls
    ]


def test_auto_answers_in_text_or_calls_in_shape(client: OpenAI) -> None:
    out = chat(client, WEATHER_Q, tools=[WEATHER_TOOL], temperature=0, max_tokens=48)
    (choice,) = out.choices
    if choice.message.tool_calls:
        assert choice.finish_reason in ("tool_calls", "length")
        for call in choice.message.tool_calls:
            assert call.function.name and call.id.startswith("call_")
    else:
        assert choice.message.content and choice.finish_reason in ("stop", "length")


def test_chat_logprobs_whole_and_streamed(client: OpenAI) -> None:
    kwargs: dict[str, Any] = {
        "temperature": 0,
        "max_tokens": 6,
        "logprobs": True,
        "top_logprobs": 3,
    }
    out = chat(client, **kwargs)
    (choice,) = out.choices
    tokens = choice.logprobs.content
    assert len(tokens) == out.usage.completion_tokens
    for t in tokens:
        assert len(t.top_logprobs) == 3 and t.logprob <= 0
        assert t.logprob == t.top_logprobs[0].logprob  # greedy: the best one
        assert t.bytes == list(t.token.encode()) or "\ufffd" in t.token
    assert b"".join(bytes(t.bytes) for t in tokens).decode() == choice.message.content
    streamed = [
        t
        for c in chat(client, stream=True, **kwargs)
        for ch in c.choices
        for t in (ch.logprobs.content if ch.logprobs else [])
    ]
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in tokens]


def test_completion_logprobs_with_the_echoed_prompt(client: OpenAI) -> None:
    prompt = "The capital of France is"
    out = client.completions.create(
        model=LLM, prompt=prompt, echo=True, logprobs=2, temperature=0, max_tokens=3
    )
    (choice,) = out.choices
    lp = choice.logprobs
    assert choice.text.startswith(prompt)
    assert len(lp.tokens) == out.usage.prompt_tokens + out.usage.completion_tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None  # nothing before it
    assert all(v is not None and v <= 0 for v in lp.token_logprobs[1:])
    assert all(len(top) >= 2 for top in lp.top_logprobs[1:])
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    assert "".join(lp.tokens) == choice.text
    kwargs: dict[str, Any] = {"echo": True, "logprobs": 2, "temperature": 0, "max_tokens": 3}
    chunks = list(client.completions.create(model=LLM, prompt=prompt, stream=True, **kwargs))
    pieces = [c.choices[0] for c in chunks if c.choices[0].logprobs]
    assert "".join(p.text for p in pieces) == choice.text
    assert [t for p in pieces for t in p.logprobs.text_offset] == lp.text_offset
    assert [t for p in pieces for t in p.logprobs.token_logprobs] == lp.token_logprobs
    plain = client.completions.create(
        model=LLM, prompt=prompt, logprobs=0, temperature=0, max_tokens=3
    )
    # The output's own logprobs do not depend on echoing the prompt.
    assert plain.choices[0].logprobs.token_logprobs == pytest.approx(
        lp.token_logprobs[-3:], abs=1e-4
    )


def test_n_choices_sample_as_seeds_s_to_s_plus_n_and_stream_with_their_index(
    client: OpenAI,
) -> None:
    kwargs: dict[str, Any] = {"temperature": 1.0, "seed": 5, "max_tokens": 8}
    out = chat(client, n=3, **kwargs)
    assert [c.index for c in out.choices] == [0, 1, 2]
    texts = [c.message.content for c in out.choices]
    singles = [chat(client, **{**kwargs, "seed": 5 + i}) for i in range(3)]
    assert texts == [s.choices[0].message.content for s in singles]
    assert out.usage.prompt_tokens == singles[0].usage.prompt_tokens  # the prompt once
    assert out.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    chunks = list(chat(client, n=3, stream=True, stream_options={"include_usage": True}, **kwargs))
    streamed = ["", "", ""]
    finished = []
    for chunk in chunks:
        for c in chunk.choices:
            streamed[c.index] += c.delta.content or ""
            if c.finish_reason:
                finished.append(c.index)
    assert streamed == texts and sorted(finished) == [0, 1, 2]
    assert chunks[-1].usage == out.usage


def test_logit_bias_steers_the_choice_of_tokens(client: OpenAI, smollm2_tokenizer: Any) -> None:
    def first_token(**kwargs: Any) -> str:
        out = chat(client, temperature=0, max_tokens=1, logprobs=True, **kwargs)
        return str(out.choices[0].logprobs.content[0].token)

    best = first_token()
    [best_id] = smollm2_tokenizer.encode(best)
    assert first_token(logit_bias={str(best_id): -100}) != best
    [forced_id] = smollm2_tokenizer.encode(" Rome")
    assert first_token(logit_bias={str(forced_id): 100}) == " Rome"
