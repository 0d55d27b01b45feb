"""Tool calls read from model output, on fixtures of each format: whole and fed a
character at a time they agree, and a stream's deltas are OpenAI's shape in order."""

from __future__ import annotations

import json

import pytest

from vigil.platform.gateway.tool_calls import (
    ArgumentsDelta,
    CallStart,
    Delta,
    HermesParser,
    Parsed,
    TextDelta,
    ToolCallParser,
    assemble,
    parse_whole,
)
from vigil.platform.gateway.tool_formats import ToolFormat

WEATHER = '{"city": "Paris", "when": ["today", {"at": "noon }"}]}'

# (format, output, expected content, expected [(name, arguments)])
FIXTURES = [
    (
        ToolFormat.HERMES,
        f'<tool_call>\n{{"name": "get_weather", "arguments": {WEATHER}}}\n</tool_call>',
        None,
        [("get_weather", WEATHER)],
    ),
    (
        ToolFormat.HERMES,
        'Let me look.\n<tool_call>\n{"name":"a","arguments":{"x":1}}\n</tool_call>\n'
        '<tool_call>\n{"name":"b","arguments":{}}\n</tool_call>',
        "Let me look.",
        [("a", '{"x":1}'), ("b", "{}")],
    ),
    # Keys in another order: read whole when the object closes.
    (
        ToolFormat.HERMES,
        '<tool_call>{"arguments": {"q": "x"}, "name": "search"}</tool_call>',
        None,
        [("search", '{"q": "x"}')],
    ),
    # No closing tag before the output ends: the call stands.
    (
        ToolFormat.HERMES,
        '<tool_call>\n{"name": "f", "arguments": {"a": 2}}',
        None,
        [("f", '{"a": 2}')],
    ),
    # Not a call: its text is content, exactly as written.
    (
        ToolFormat.HERMES,
        "<tool_call>not json</tool_call> ok",
        "<tool_call>not json</tool_call> ok",
        [],
    ),
    (ToolFormat.HERMES, "Plain answer, no tools.\n\n", "Plain answer, no tools.\n\n", []),
    (ToolFormat.HERMES, "a < b and <tool_ is not a tag", "a < b and <tool_ is not a tag", []),
    (
        ToolFormat.LLAMA3_JSON,
        '{"name": "get_weather", "parameters": {"city": "Rome"}}',
        None,
        [("get_weather", '{"city": "Rome"}')],
    ),
    (
        ToolFormat.LLAMA3_JSON,
        '<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "arguments": {"k": [1]}}',
        None,
        [("a", "{}"), ("b", '{"k": [1]}')],
    ),
    (ToolFormat.LLAMA3_JSON, "  The weather is fine.", "  The weather is fine.", []),
    (ToolFormat.LLAMA3_JSON, '{"not": "a call"} at all', '{"not": "a call"} at all', []),
]


def streamed(parser: ToolCallParser, text: str) -> list[Delta]:
    deltas = [d for ch in text for d in parser.feed(ch)]
    return deltas + parser.finish()


def calls_of(parsed: Parsed) -> list[tuple[str, str]]:
    return [(c.name, c.arguments) for c in parsed.calls]


@pytest.mark.parametrize(("fmt", "text", "content", "calls"), FIXTURES)
def test_each_format_is_read_alike_whole_and_streamed(
    fmt: ToolFormat, text: str, content: str | None, calls: list[tuple[str, str]]
) -> None:
    whole = parse_whole(fmt.parser(), text)
    assert (whole.content, calls_of(whole)) == (content, calls)
    stream = assemble(streamed(fmt.parser(), text))
    assert (stream.content, calls_of(stream)) == (content, calls)
    for _, arguments in calls:
        json.loads(arguments)


def test_arguments_stream_in_fragments_after_the_calls_start() -> None:
    text = f'<tool_call>\n{{"name": "get_weather", "arguments": {WEATHER}}}\n</tool_call>'
    deltas = streamed(HermesParser(), text)
    start, *fragments = deltas
    assert isinstance(start, CallStart) and start.name == "get_weather" and start.index == 0
    assert start.id.startswith("call_")
    assert len(fragments) > 5 and all(isinstance(f, ArgumentsDelta) for f in fragments)
    assert "".join(f.text for f in fragments if isinstance(f, ArgumentsDelta)) == WEATHER


def test_text_is_sent_as_it_comes_and_the_newline_before_a_call_is_not_content() -> None:
    parser = HermesParser()
    assert parser.feed("Checking.\n") == [TextDelta("Checking.")]
    assert parser.feed("<tool_") == []  # may begin a tag: held
    assert parser.feed('call>{"name": "f", "arguments": ') == []
    # The call starts with its arguments' first bracket (an argument that is no object
    # is read whole at the end).
    start, *fragments = parser.feed('{"a": 1')
    assert isinstance(start, CallStart) and (start.index, start.name) == (0, "f")
    assert fragments == [ArgumentsDelta(0, '{"a": 1')]
    assert parser.feed("}}\n</tool_call>") == [ArgumentsDelta(0, "}")]
    assert parser.finish() == []
