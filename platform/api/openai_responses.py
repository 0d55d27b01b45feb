"""Response bodies of the OpenAI-compatible API, whole and streamed."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import Struct


class Usage(Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class FunctionCallOut(Struct):
    name: str
    arguments: str  # JSON text


class ToolCallOut(Struct):
    id: str
    function: FunctionCallOut
    type: Literal["function"] = "function"


class ChatMessageOut(Struct, omit_defaults=True):
    role: Literal["assistant"]
    content: str | None  # null when the answer is tool calls alone
    tool_calls: list[ToolCallOut] | None = None


FinishReasonName = Literal["stop", "length", "tool_calls"]


class TopLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int]  # the token's UTF-8 bytes (a token may hold part of a character)


class TokenLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(Struct):
    content: list[TokenLogprob] | None
    refusal: None = None


class ChatChoice(Struct):
    index: int
    message: ChatMessageOut
    finish_reason: FinishReasonName | None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    object: Literal["chat.completion"] = "chat.completion"


class LegacyLogprobs(Struct):
    """The completions API's shape: per token, its text, its logprob (null for the first
    token of an echoed prompt), its best alternatives, and where it starts in the text."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(Struct):
    index: int
    text: str
    finish_reason: FinishReasonName | None
    logprobs: LegacyLogprobs | None = None


class Completion(Struct):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    object: Literal["text_completion"] = "text_completion"


class Embedding(Struct):
    index: int
    embedding: list[float] | str  # str: little-endian float32s, base64-encoded
    object: Literal["embedding"] = "embedding"


class EmbeddingUsage(Struct):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(Struct):
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
    object: Literal["list"] = "list"


class ModelPrecision(Struct):
    """Vigil's addition to a model card: what the model runs as and why
    (engine/precision.py); null until a worker has loaded it."""

    runs_as: str  # int4, int8, or the float dtype (float32, bfloat16, ...)
    quantization: str  # none, int4 or int8
    dtype: str
    reason: str


class ModelVigil(Struct):
    precision: ModelPrecision | None = None


class ModelCard(Struct):
    id: str
    created: int
    owned_by: str
    object: Literal["model"] = "model"
    vigil: ModelVigil | None = None


class ModelList(Struct):
    data: list[ModelCard]
    object: Literal["list"] = "list"


# ---- streamed chunks (one per SSE message) --------------------------------


class FunctionDelta(Struct, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None  # a fragment: the client joins them


class ToolCallDelta(Struct, omit_defaults=True):
    """A call's first delta has its id, type and name; the rest carry arguments."""

    index: int  # of the call within its choice
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionDelta | None = None


class ChatDelta(Struct, omit_defaults=True):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(Struct):
    index: int
    delta: ChatDelta
    finish_reason: FinishReasonName | None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(
    Struct, omit_defaults=True, tag_field="object", tag="chat.completion.chunk"
):
    """usage only on the last chunk, with no choices, when stream_options asks for it."""

    id: str
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class CompletionChunk(Struct, omit_defaults=True, tag_field="object", tag="text_completion"):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


def sse(payload: Any) -> bytes:
    """One Server-Sent Events message carrying a JSON payload."""
    return b"data: " + msgspec.json.encode(payload) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
