"""A generation as the gateway is asked for it, made at the API edge: the prompt in one
of three forms, the sampling choices that fall back on the serving version's defaults
(gateway/prompt.py applies them), and what the output must be: a response format, or
the tools it may or must call (gateway/tool_formats.py renders and constrains them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from vigil.engine.request import Constraint, RequestId
from vigil.engine.tokenizer import ChatMessage


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    messages: tuple[ChatMessage, ...]


@dataclass(frozen=True, slots=True)
class TextPrompt:
    text: str


@dataclass(frozen=True, slots=True)
class TokenPrompt:
    ids: tuple[int, ...]


Prompt = ChatPrompt | TextPrompt | TokenPrompt


@dataclass(frozen=True, slots=True)
class FunctionTool:
    name: str
    description: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)  # a JSON schema

    def spec(self) -> dict[str, Any]:
        """The tool as OpenAI spells it, and as chat templates read it."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.parameters or {"type": "object", "properties": {}}
        return {"type": "function", "function": function}


class ToolChoiceMode(StrEnum):
    NONE = "none"  # tools are not offered: plain text
    AUTO = "auto"  # the model writes text or calls; calls are parsed from its output
    REQUIRED = "required"  # at least one call of one of the tools, held to a grammar
    FUNCTION = "function"  # one call of the named function, held to a grammar


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: ToolChoiceMode = ToolChoiceMode.AUTO
    function: str | None = None  # the name, for FUNCTION

    @property
    def forced(self) -> bool:
        return self.mode in (ToolChoiceMode.REQUIRED, ToolChoiceMode.FUNCTION)


@dataclass(frozen=True, slots=True)
class GenerationParams:
    """One generation as the gateway takes it. Sampling fields left None take the
    version's defaults, then Vigil's."""

    request_id: RequestId
    model: str  # the deployment's name
    prompt: Prompt
    prompt_param: str  # the request field the prompt came from, named in errors
    max_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0
    n: int = 1  # choices of the one prompt; choice i samples with seed + i
    logprobs: int | None = None  # top alternatives per output token (0-20); None: none
    prompt_logprobs: int | None = None  # the same for the prompt's tokens (echo)
    logit_bias: tuple[tuple[int, float], ...] = ()
    response_format: Constraint | None = None  # JSON schema or any JSON object
    response_format_param: str = "response_format"  # the field it came from, for errors
    tools: tuple[FunctionTool, ...] = ()
    tool_choice: ToolChoice = ToolChoice()
    parallel_tool_calls: bool = True

    @property
    def offers_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice.mode is not ToolChoiceMode.NONE
