"""How a model version is told about tools, how its calls look, and the grammar that
holds it to calling one when the request says it must.

A version's format is its `tool_parser` param (`hermes` or `llama3_json`); without one,
it is read from the chat template (Llama 3's `<|python_tag|>` or `"parameters"`:
llama3_json) and is otherwise hermes. A template with a tools section of its own renders
the tools and the conversation's calls and results itself (Jinja, as the model ships
it). Any other template gets the default rendering here, in the format's own words:

    hermes       a system prompt listing the functions in <tools></tools> and asking for
                 <tool_call>{"name": ..., "arguments": ...}</tool_call>; an assistant's
                 calls written back as such blocks; tool results as a user turn of
                 <tool_response></tool_response> blocks (Qwen 2.5's layout)
    llama3_json  a system prompt listing the functions and asking for
                 {"name": ..., "parameters": ...}; calls joined by '; '

With tool_choice `required` or a named function the output is held to a grammar
(llguidance Lark, `%json` for each call's object): only that function, or one of the
tools, each with arguments that follow its parameters' schema; several calls (at most
MAX_PARALLEL_CALLS) when parallel_tool_calls allows. JSON inside is compact, as every
other constrained output (engine/grammar.py says why).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from vigil.engine.tokenizer import ChatMessage, ToolCall
from vigil.platform.gateway.params import FunctionTool, ToolChoice, ToolChoiceMode
from vigil.platform.gateway.tool_calls import HermesParser, Llama3JsonParser, ToolCallParser

MAX_PARALLEL_CALLS = 8  # calls one constrained answer may hold
_COMPACT: dict[str, Any] = {"x-guidance": {"whitespace_flexible": False}}


class ToolFormat(StrEnum):
    HERMES = "hermes"
    LLAMA3_JSON = "llama3_json"

    def parser(self) -> ToolCallParser:
        return HermesParser() if self is ToolFormat.HERMES else Llama3JsonParser()

    @property
    def arguments_key(self) -> str:
        return "arguments" if self is ToolFormat.HERMES else "parameters"


def format_for(param: str | None, chat_template: str) -> ToolFormat:
    """The version's `tool_parser` param, else what its chat template shows."""
    if param is not None:
        return ToolFormat(param)
    if "<|python_tag|>" in chat_template or '"parameters"' in chat_template:
        return ToolFormat.LLAMA3_JSON
    return ToolFormat.HERMES


@dataclass(frozen=True, slots=True)
class ToolPrompt:
    """A conversation ready for a template that knows nothing of tools."""

    messages: tuple[ChatMessage, ...]


def default_rendering(
    fmt: ToolFormat, messages: Sequence[ChatMessage], tools: Sequence[FunctionTool]
) -> ToolPrompt:
    """The conversation with the tools in its system prompt, calls written as the model
    writes them and results as user turns (see the module's docstring)."""
    listing = _system_prompt(fmt, tools) if tools else ""
    out: list[ChatMessage] = []
    results: list[str] = []
    for m in messages:
        if m.role == "tool":
            results.append(f"<tool_response>\n{m.content}\n</tool_response>")
            continue
        if results:
            out.append(ChatMessage("user", "\n".join(results)))
            results = []
        if m.tool_calls:
            calls = _calls_text(fmt, m.tool_calls)
            out.append(ChatMessage(m.role, f"{m.content}\n{calls}" if m.content else calls))
        else:
            out.append(ChatMessage(m.role, m.content))
    if results:
        out.append(ChatMessage("user", "\n".join(results)))
    if listing:
        if out and out[0].role == "system":
            out[0] = ChatMessage("system", f"{out[0].content}\n\n{listing}")
        else:
            out.insert(0, ChatMessage("system", listing))
    return ToolPrompt(tuple(out))


def _system_prompt(fmt: ToolFormat, tools: Sequence[FunctionTool]) -> str:
    specs = "\n".join(json.dumps(t.spec(), ensure_ascii=False) for t in tools)
    if fmt is ToolFormat.LLAMA3_JSON:
        return (
            "You have access to the following functions. To call a function, respond with "
            'JSON of the form {"name": function name, "parameters": dictionary of argument '
            "name and its value}; to call several, join them with '; '. Do not use "
            f"variables.\n\n{specs}"
        )
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{specs}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def _calls_text(fmt: ToolFormat, calls: Sequence[ToolCall]) -> str:
    objects = [
        f'{{"name": {json.dumps(c.name)}, "{fmt.arguments_key}": {c.arguments or "{}"}}}'
        for c in calls
    ]
    if fmt is ToolFormat.LLAMA3_JSON:
        return "; ".join(objects)
    return "\n".join(f"<tool_call>\n{o}\n</tool_call>" for o in objects)


def calls_grammar(
    fmt: ToolFormat,
    tools: Sequence[FunctionTool],
    choice: ToolChoice,
    parallel: bool,
    alternative: dict[str, Any] | None = None,
) -> str:
    """A Lark grammar for the calls the choice allows (tool_choice `required`, a named
    function; or, with `alternative`, `auto` between calls and a JSON answer of that
    schema, the response_format)."""
    if choice.mode is ToolChoiceMode.FUNCTION:
        allowed = [t for t in tools if t.name == choice.function]
        assert allowed, f"tool_choice names {choice.function!r}, which is not a tool"
        most = 1
    else:
        allowed, most = list(tools), MAX_PARALLEL_CALLS if parallel else 1
    defs: dict[str, Any] = {}
    objects = [
        {
            "type": "object",
            "properties": {
                "name": {"const": t.name},
                fmt.arguments_key: _hoisted(
                    _closed(t.parameters or {"type": "object"}), f"t{i}_", defs
                ),
            },
            "required": ["name", fmt.arguments_key],
            "additionalProperties": False,
        }
        for i, t in enumerate(allowed)
    ]
    schema = objects[0] if len(objects) == 1 else {"anyOf": objects}
    if defs:
        schema = {**schema, "$defs": defs}
    if fmt is ToolFormat.LLAMA3_JSON:
        call, separator = "%json " + _json(schema), '"; "'
    else:
        call, separator = '"<tool_call>\\n" %json ' + _json(schema) + ' "\\n</tool_call>"', '"\\n"'
    more = f" ({separator} call){{0,{most - 1}}}" if most > 1 else ""
    rules = [f"calls: call{more}", f"call: {call}"]
    if alternative is None:
        return "\n".join(["start: calls", *rules])
    return "\n".join(["start: calls | answer", *rules, f"answer: %json {_json(alternative)}"])


def _json(schema: dict[str, Any]) -> str:
    return json.dumps({**schema, **_COMPACT}, ensure_ascii=False)


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    """A function's parameters with every object that does not say otherwise closed to the
    properties it names, as a call's arguments are read (vLLM's default grammars do the
    same): a small model left free to add keys writes on until max_tokens."""
    by_name = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
    literal = ("const", "enum", "default", "examples", "required")
    open_by_schema = {"additionalProperties", "patternProperties", "unevaluatedProperties"}

    def close(node: Any) -> Any:
        if isinstance(node, list):
            return [close(v) for v in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in literal:
                out[key] = value
            elif key in by_name and isinstance(value, dict):
                out[key] = {name: close(v) for name, v in value.items()}
            else:
                out[key] = close(value)
        is_object = node.get("type") == "object" or isinstance(node.get("properties"), dict)
        if is_object and not open_by_schema & node.keys():
            out["additionalProperties"] = False
        return out

    return dict(close(schema))


def _hoisted(schema: dict[str, Any], prefix: str, defs: dict[str, Any]) -> dict[str, Any]:
    """A tool's parameters schema placed inside a larger one: its definitions ($defs, or
    draft 7's definitions) move to the root's $defs under `prefix`, and its references
    to them follow (a `#/$defs/X` inside would otherwise resolve against the new root)."""
    own = {**schema.get("definitions", {}), **schema.get("$defs", {})}

    def moved(node: Any) -> Any:
        if isinstance(node, list):
            return [moved(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: moved(v) for k, v in node.items() if k not in ("$defs", "definitions")}
        ref = node.get("$ref")
        if isinstance(ref, str):
            for root in ("#/$defs/", "#/definitions/"):
                if ref.startswith(root):
                    out["$ref"] = f"#/$defs/{prefix}{ref[len(root) :]}"
        return out

    for name, definition in own.items():
        defs[prefix + name] = moved(definition)
    return dict(moved(schema))
