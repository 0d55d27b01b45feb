"""The nested parts of a chat request: messages (with tool calls and tool results),
the tools offered, the tool choice, and the response format."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from vigil.engine.grammar import GrammarError
from vigil.engine.request import Constraint
from vigil.engine.tokenizer import ChatMessage, ToolCall
from vigil.platform.errors import InvalidRequest

FunctionName = Annotated[str, Meta(pattern="^[A-Za-z0-9_-]{1,64}$")]
JsonSchema = dict[str, Any]


class TextPart(Struct, forbid_unknown_fields=True):
    type: Literal["text"]
    text: str


class FunctionCallIn(Struct, forbid_unknown_fields=True):
    name: str
    arguments: str  # JSON text, as the model wrote it


class ToolCallIn(Struct, forbid_unknown_fields=True):
    id: str
    type: Literal["function"]
    function: FunctionCallIn


class ChatMessageIn(Struct, forbid_unknown_fields=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None  # an assistant's
    tool_call_id: str | None = None  # a tool's: the call it answers
    refusal: str | None = None  # sent back by clients that echo an answer; not read

    def message(self, at: str) -> ChatMessage:
        """The message for the chat template; `at` names it in errors."""
        calls = self.tool_calls or []
        if self.content is None and not (self.role == "assistant" and calls):
            raise InvalidRequest(
                f"{at}.content is missing: only an assistant message with tool_calls may "
                "have none.",
                param=f"{at}.content",
            )
        if calls and self.role != "assistant":
            raise InvalidRequest(
                f"{at}.tool_calls: only assistant messages make tool calls.",
                param=f"{at}.tool_calls",
            )
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise InvalidRequest(
                f"{at}: a tool message needs tool_call_id (the id of the call it answers), "
                "and only a tool message takes one.",
                param=f"{at}.tool_call_id",
            )
        role = "system" if self.role == "developer" else self.role
        text = self.content if isinstance(self.content, str) else ""
        if isinstance(self.content, list):
            text = "".join(part.text for part in self.content)
        tool_calls = tuple(ToolCall(c.id, c.function.name, c.function.arguments) for c in calls)
        return ChatMessage(role, text, tool_calls, self.tool_call_id)


class FunctionIn(Struct, forbid_unknown_fields=True):
    name: FunctionName
    description: str | None = None
    parameters: JsonSchema | None = None
    strict: bool | None = None  # arguments always follow the schema when a call is forced


class ToolIn(Struct, forbid_unknown_fields=True):
    type: Literal["function"]
    function: FunctionIn


class NamedFunction(Struct, forbid_unknown_fields=True):
    name: str


class NamedToolChoice(Struct, forbid_unknown_fields=True):
    type: Literal["function"]
    function: NamedFunction


class TextFormat(Struct, tag_field="type", tag="text", forbid_unknown_fields=True):
    pass


class JsonObjectFormat(Struct, tag_field="type", tag="json_object", forbid_unknown_fields=True):
    pass


class JsonSchemaSpec(Struct, forbid_unknown_fields=True):
    name: FunctionName
    description: str | None = None
    schema_: JsonSchema | None = msgspec.field(default=None, name="schema")
    strict: bool | None = None  # the output always follows the schema


class JsonSchemaFormat(Struct, tag_field="type", tag="json_schema", forbid_unknown_fields=True):
    json_schema: JsonSchemaSpec


ResponseFormat = TextFormat | JsonObjectFormat | JsonSchemaFormat


def output_constraint(
    fmt: ResponseFormat | None, guided_json: JsonSchema | str | None
) -> Constraint | None:
    if guided_json is not None:
        if fmt is not None and not isinstance(fmt, TextFormat):
            raise InvalidRequest(
                "Send response_format or guided_json, not both.", param="guided_json"
            )
        try:
            return Constraint.json_schema(guided_json)
        except GrammarError as exc:
            raise InvalidRequest(str(exc), param="guided_json", code="invalid_schema") from None
    if isinstance(fmt, JsonObjectFormat):
        return Constraint.json_object()
    if isinstance(fmt, JsonSchemaFormat):
        return Constraint.json_schema(fmt.json_schema.schema_ or {})
    return None
