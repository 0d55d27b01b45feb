"""The request surface applications send (tools, response formats, logprobs, n,
logit_bias, metadata) read into a generation, every refusal naming the field to fix; and
the answers' shapes: tool calls, content null, logprobs in the chat and legacy forms."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from vigil.engine.request import ConstraintKind, SampledLogprobs, TokenLogprob
from vigil.platform.api.body import decode_body
from vigil.platform.api.logprobs import LegacyWriter, chat_logprobs
from vigil.platform.api.openai_responses import ChatMessageOut, FunctionCallOut, ToolCallOut
from vigil.platform.api.openai_schemas import ChatCompletionRequest, CompletionRequest
from vigil.platform.errors import InvalidRequest
from vigil.platform.gateway.params import ChatPrompt, GenerationParams, ToolChoiceMode

MAX_CHOICES = 8
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": True,
    },
}
USER = {"role": "user", "content": "Weather in Paris?"}


def chat(**body: Any) -> GenerationParams:
    raw = json.dumps({"model": "m", "messages": [USER], **body}).encode()
    return decode_body(raw, ChatCompletionRequest).params(MAX_CHOICES)


def completion(**body: Any) -> GenerationParams:
    raw = json.dumps({"model": "m", "prompt": "Hello", **body}).encode()
    return decode_body(raw, CompletionRequest).params(MAX_CHOICES)


def refused(make: Any, **body: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        make(**body)
    return info.value


def test_a_tool_round_trip_conversation_is_read_with_its_calls_and_results() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    params = chat(
        messages=[
            USER,
            {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
        ],
        tools=[TOOL],
    )
    assert isinstance(params.prompt, ChatPrompt)
    _, assistant, tool = params.prompt.messages
    assert assistant.content == "" and assistant.tool_calls[0].name == "get_weather"
    assert (tool.role, tool.tool_call_id, tool.content) == ("tool", "call_1", "18 C")
    assert params.tool_choice.mode is ToolChoiceMode.AUTO and params.offers_tools
    assert params.tools[0].parameters["properties"] == {"city": {"type": "string"}}


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        (
            {"messages": [{"role": "tool", "content": "x"}]},
            "messages[0].tool_call_id",
            "tool_call_id",
        ),
        ({"messages": [{"role": "user"}]}, "messages[0].content", "missing"),
        (
            {"messages": [{"role": "assistant", "content": None}]},
            "messages[0].content",
            "tool_calls",
        ),
        ({"tool_choice": "required"}, "tool_choice", "needs tools"),
        (
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            "not among the tools",
        ),
        ({"tools": [TOOL, TOOL]}, "tools", "name of its own"),
        ({"top_logprobs": 3}, "top_logprobs", "logprobs: true"),
        ({"logit_bias": {"abc": 5}}, "logit_bias", "token ids"),
        ({"n": MAX_CHOICES + 1}, "n", f"at most {MAX_CHOICES}"),
        ({"n": 2, "seed": 2**63 - 1}, "seed", "seed + n - 1"),
        (
            {"response_format": {"type": "json_object"}, "guided_json": {"type": "object"}},
            "guided_json",
            "not both",
        ),
        ({"guided_json": "{not json"}, "guided_json", "not valid JSON"),
    ],
)
def test_what_cannot_be_honoured_is_refused_naming_the_field(
    body: dict[str, Any], param: str, says: str
) -> None:
    error = refused(chat, **body)
    assert error.param == param and says in error.message


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"response_format": {"type": "yaml"}}, "response_format"),
        ({"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
        ({"logit_bias": {"5": 101}}, "logit_bias"),
        ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools"),
        ({"best_of": 2}, "best_of"),
        ({"functions": []}, "functions"),
    ],
)
def test_bad_values_and_unknown_fields_are_400s_that_name_them(
    body: dict[str, Any], field: str
) -> None:
    assert field in (refused(chat, **body).param or "")


def test_sampling_fields_reach_the_gateway() -> None:
    schema = {"type": "object", "properties": {"a": {"enum": [1, 2]}}}
    params = chat(
        n=3,
        seed=7,
        logprobs=True,
        top_logprobs=5,
        logit_bias={"50": -100, "12": 2.5},
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
        metadata={"team": "search"},
        store=False,
        parallel_tool_calls=False,
    )
    assert (params.n, params.seed, params.logprobs) == (3, 7, 5)
    assert params.logit_bias == ((12, 2.5), (50, -100.0))
    assert params.response_format is not None
    assert params.response_format.kind is ConstraintKind.JSON_SCHEMA
    assert json.loads(params.response_format.text) == schema
    assert chat(logprobs=True).logprobs == 0 and chat().logprobs is None
    assert chat(response_format={"type": "text"}).response_format is None
    json_object = chat(response_format={"type": "json_object"}).response_format
    assert json_object is not None and json_object.kind is ConstraintKind.JSON_OBJECT


def test_completions_take_legacy_logprobs_echo_and_guided_json() -> None:
    params = completion(logprobs=2, echo=True, guided_json={"type": "object"})
    assert (params.logprobs, params.prompt_logprobs) == (2, 2)
    assert params.response_format_param == "guided_json"
    assert completion(logprobs=2).prompt_logprobs is None  # only echoed prompts are scored
    assert completion(echo=True).prompt_logprobs is None
    assert "logprobs" in (refused(completion, logprobs=True).param or "")


def test_an_answer_of_tool_calls_alone_has_null_content_and_none_has_no_tool_calls() -> None:
    call = ToolCallOut("call_1", FunctionCallOut("f", "{}"))
    calls_only = json.loads(msgspec.json.encode(ChatMessageOut("assistant", None, [call])))
    assert calls_only == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "function": {"name": "f", "arguments": "{}"}, "type": "function"}
        ],
    }
    text = json.loads(msgspec.json.encode(ChatMessageOut("assistant", "hi")))
    assert text == {"role": "assistant", "content": "hi"}


TOKENS = {1: b"Hel", 2: b"lo", 3: b" \xe2\x9c", 4: b"\x93"}  # the last two: one character


def test_chat_logprobs_give_each_tokens_bytes_and_alternatives() -> None:
    records = [
        SampledLogprobs(1, -0.5, (TokenLogprob(1, -0.5), TokenLogprob(2, -1.5))),
        SampledLogprobs(3, float("-inf"), ()),
    ]
    out = chat_logprobs(records, TOKENS.__getitem__)
    assert out.content is not None
    first, second = out.content
    assert (first.token, first.logprob, first.bytes) == ("Hel", -0.5, [72, 101, 108])
    assert [(t.token, t.logprob) for t in first.top_logprobs] == [("Hel", -0.5), ("lo", -1.5)]
    assert second.bytes == [32, 0xE2, 0x9C] and second.token == " \ufffd"
    assert second.logprob == -9999.0  # JSON has no -Infinity


def test_legacy_logprobs_of_an_echoed_prompt_start_with_nulls_and_offsets_run_on() -> None:
    writer = LegacyWriter(TOKENS.__getitem__)
    prompt = writer.echoed_prompt([1, 2], [SampledLogprobs(2, -0.25, (TokenLogprob(1, -0.1),))])
    assert prompt.tokens == ["Hel", "lo"] and prompt.text_offset == [0, 3]
    assert prompt.token_logprobs == [None, -0.25]
    assert prompt.top_logprobs == [None, {"Hel": -0.1, "lo": -0.25}]  # the chosen one too
    output = writer.tokens([SampledLogprobs(1, -2.0, ())])
    assert output.text_offset == [5] and output.top_logprobs == [{"Hel": -2.0}]
