"""How tools reach a template that knows nothing of them, and the grammar that forces a
call: it takes exactly the calls the choice allows, with arguments of their schema."""

from __future__ import annotations

import json
from typing import Any

import llguidance
import pytest

from vigil.engine.tokenizer import ChatMessage, Tokenizer, ToolCall
from vigil.platform.control.versions.checks import TOOL_PARSERS
from vigil.platform.gateway.params import FunctionTool, ToolChoice, ToolChoiceMode
from vigil.platform.gateway.tool_formats import (
    MAX_PARALLEL_CALLS,
    ToolFormat,
    calls_grammar,
    default_rendering,
    format_for,
)

WEATHER = FunctionTool(
    "get_weather",
    "Weather in a city",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
)
# Pydantic writes nested models as $defs, referenced from the root.
BOOKING = FunctionTool(
    "book",
    None,
    {
        "$defs": {
            "Guest": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
                "additionalProperties": False,
            }
        },
        "type": "object",
        "properties": {"guests": {"type": "array", "items": {"$ref": "#/$defs/Guest"}}},
        "required": ["guests"],
        "additionalProperties": False,
    },
)
REQUIRED = ToolChoice(ToolChoiceMode.REQUIRED)


@pytest.fixture(scope="module")
def lltokenizer(smollm2_tokenizer: Tokenizer) -> llguidance.LLTokenizer:
    return llguidance.LLTokenizer(
        smollm2_tokenizer.backend.to_str(),
        n_vocab=smollm2_tokenizer.vocab_size,
        eos_token=sorted(smollm2_tokenizer.eos_token_ids),
    )


def accepts(
    grammar: str, text: str, lltokenizer: llguidance.LLTokenizer, tokenizer: Tokenizer
) -> bool:
    """Whether the grammar takes exactly `text` and may end there."""
    matcher = llguidance.LLMatcher(lltokenizer, grammar, log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    for token in tokenizer.encode(text):
        if not matcher.consume_token(token):
            return False
    return bool(matcher.is_accepting())


def hermes(*calls: tuple[str, dict[str, Any]]) -> str:
    blocks = [
        "<tool_call>\n"
        + json.dumps({"name": n, "arguments": a}, separators=(",", ":"))
        + "\n</tool_call>"
        for n, a in calls
    ]
    return "\n".join(blocks)


def test_a_named_function_takes_one_call_of_it_with_arguments_of_its_schema(
    lltokenizer: llguidance.LLTokenizer, smollm2_tokenizer: Tokenizer
) -> None:
    grammar = calls_grammar(
        ToolFormat.HERMES,
        [WEATHER, BOOKING],
        ToolChoice(ToolChoiceMode.FUNCTION, "get_weather"),
        True,
    )
    ok = ("get_weather", {"city": "Paris", "unit": "c"})
    assert accepts(grammar, hermes(ok), lltokenizer, smollm2_tokenizer)
    for bad in [
        hermes(("get_weather", {"city": "Paris", "unit": "kelvin"})),  # not in the enum
        hermes(("get_weather", {"city": "Paris"})),  # a required argument missing
        hermes(("book", {"guests": []})),  # another function
        hermes(ok, ok),  # a named function is called once
        json.dumps({"name": "get_weather", "arguments": ok[1]}),  # not in the format
    ]:
        assert not accepts(grammar, bad, lltokenizer, smollm2_tokenizer), bad


def test_required_takes_any_tool_and_parallel_calls_up_to_the_bound(
    lltokenizer: llguidance.LLTokenizer, smollm2_tokenizer: Tokenizer
) -> None:
    weather = ("get_weather", {"city": "Rome", "unit": "f"})
    booking = ("book", {"guests": [{"name": "Ada"}]})  # through the hoisted $defs
    parallel = calls_grammar(ToolFormat.HERMES, [WEATHER, BOOKING], REQUIRED, True)
    assert accepts(parallel, hermes(booking), lltokenizer, smollm2_tokenizer)
    assert accepts(parallel, hermes(weather, booking), lltokenizer, smollm2_tokenizer)
    too_many = hermes(*[weather] * (MAX_PARALLEL_CALLS + 1))
    assert not accepts(parallel, too_many, lltokenizer, smollm2_tokenizer)
    assert not accepts(parallel, "", lltokenizer, smollm2_tokenizer)  # at least one call
    assert not accepts(
        parallel, hermes(("book", {"guests": [{"age": 3}]})), lltokenizer, smollm2_tokenizer
    )
    single = calls_grammar(ToolFormat.HERMES, [WEATHER, BOOKING], REQUIRED, False)
    assert not accepts(single, hermes(weather, booking), lltokenizer, smollm2_tokenizer)


def test_objects_a_schema_leaves_open_are_closed_and_those_it_opens_stay_open(
    lltokenizer: llguidance.LLTokenizer, smollm2_tokenizer: Tokenizer
) -> None:
    """Most tools' schemas (the OpenAI docs' own examples) omit additionalProperties: a
    forced call's arguments hold to the keys they name, at every depth, as vLLM's do; a
    property may itself be called "properties" or "type"."""
    loose = FunctionTool(
        "lookup",
        "",
        {
            "type": "object",
            "properties": {
                "where": {"type": "object", "properties": {"city": {"type": "string"}}},
                "properties": {"type": "string"},
                "tags": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["where"],
        },
    )
    grammar = calls_grammar(ToolFormat.HERMES, [loose], REQUIRED, False)
    ok = {"where": {"city": "Oslo"}, "properties": "x", "tags": {"any": "key"}}
    assert accepts(grammar, hermes(("lookup", ok)), lltokenizer, smollm2_tokenizer)
    for extra in [
        {"where": {"city": "Oslo"}, "unit": "c"},
        {"where": {"city": "Oslo", "country": "NO"}},
    ]:
        call = hermes(("lookup", extra))
        assert not accepts(grammar, call, lltokenizer, smollm2_tokenizer), extra


def test_llama3_calls_are_json_joined_by_semicolons_and_auto_may_answer_in_json(
    lltokenizer: llguidance.LLTokenizer, smollm2_tokenizer: Tokenizer
) -> None:
    call = '{"name":"get_weather","parameters":{"city":"Oslo","unit":"c"}}'
    forced = calls_grammar(ToolFormat.LLAMA3_JSON, [WEATHER], REQUIRED, True)
    assert accepts(forced, f"{call}; {call}", lltokenizer, smollm2_tokenizer)
    answer = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    auto = calls_grammar(ToolFormat.LLAMA3_JSON, [WEATHER], ToolChoice(), True, answer)
    assert accepts(auto, call, lltokenizer, smollm2_tokenizer)
    assert accepts(auto, '{"ok":true}', lltokenizer, smollm2_tokenizer)
    assert not accepts(auto, "sure", lltokenizer, smollm2_tokenizer)


def test_default_rendering_lists_tools_and_writes_calls_and_results_as_the_model_does() -> None:
    call = ToolCall("call_1", "get_weather", '{"city": "Paris", "unit": "c"}')
    messages = [
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "Weather in Paris?"),
        ChatMessage("assistant", "", (call,)),
        ChatMessage("tool", "18 C", tool_call_id="call_1"),
        ChatMessage("tool", "sunny", tool_call_id="call_1"),
    ]
    rendered = default_rendering(ToolFormat.HERMES, messages, [WEATHER]).messages
    assert [m.role for m in rendered] == ["system", "user", "assistant", "user"]
    system = rendered[0].content
    assert system.startswith("Be brief.\n\n# Tools") and '"name": "get_weather"' in system
    assert rendered[2].content == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}'
        "\n</tool_call>"
    )
    assert rendered[3].content == (
        "<tool_response>\n18 C\n</tool_response>\n<tool_response>\nsunny\n</tool_response>"
    )
    llama = default_rendering(ToolFormat.LLAMA3_JSON, messages[1:3], [WEATHER]).messages
    assert llama[0].role == "system" and '"parameters"' in llama[0].content
    assert llama[2].content.startswith('{"name": "get_weather", "parameters": {')


def test_the_format_is_the_versions_param_else_read_from_its_template() -> None:
    assert format_for("llama3_json", "") is ToolFormat.LLAMA3_JSON
    assert format_for(None, "{{ '<|python_tag|>' }}") is ToolFormat.LLAMA3_JSON
    assert format_for(None, "{% for tool in tools %}<tool_call>{% endfor %}") is ToolFormat.HERMES
    assert format_for(None, "") is ToolFormat.HERMES


def test_a_versions_tool_parser_param_takes_exactly_the_formats() -> None:
    assert set(TOOL_PARSERS) == {f.value for f in ToolFormat}
