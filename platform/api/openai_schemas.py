"""Request and response bodies of the OpenAI-compatible API.

Unknown fields are refused (a typo must not be silently ignored); fields that
OpenAI defines but Vigil does not implement are accepted only at their
neutral value and otherwise get a 400 that names them (see `unsupported`).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from vigil.engine.request import RequestId
from vigil.engine.tokenizer import ChatMessage
from vigil.platform.errors import InvalidRequest
from vigil.platform.gateway.params import (
    ChatPrompt,
    GenerationParams,
    Prompt,
    TextPrompt,
    TokenPrompt,
)

NonNegativeFloat = Annotated[float, Meta(ge=0.0)]
PositiveInt = Annotated[int, Meta(ge=1)]
Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, Meta(gt=0.0, le=1.0)]
TopK = Annotated[int, Meta(ge=-1)]  # -1 or 0: no top-k cut (vLLM uses -1)
Seed = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
StopString = Annotated[str, Meta(min_length=1)]
StopStrings = StopString | Annotated[list[StopString], Meta(max_length=16)]


class StreamOptions(Struct, forbid_unknown_fields=True):
    include_usage: bool = False


class TextPart(Struct, forbid_unknown_fields=True):
    type: Literal["text"]
    text: str


class ChatMessageIn(Struct, forbid_unknown_fields=True):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class SamplingFields(Struct, kw_only=True, forbid_unknown_fields=True):
    """Fields shared by chat and text completions."""

    model: Annotated[str, Meta(min_length=1)]
    max_tokens: PositiveInt | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    seed: Seed | None = None
    stop: StopStrings | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: PositiveInt = 1
    user: str | None = None
    ignore_eos: bool = False
    min_tokens: Annotated[int, Meta(ge=0)] = 0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: bool | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def _params(
        self, id_prefix: str, prompt: Prompt, prompt_param: str, max_tokens: int | None
    ) -> GenerationParams:
        """What the gateway is asked to generate, once every field is one Vigil honours."""
        problem = self._unsupported(max_tokens)
        if problem is not None:
            field, advice = problem
            raise InvalidRequest(
                f"'{field}' is not supported: {advice}", param=field, code="unsupported_parameter"
            )
        stop = self.stop if self.stop is None or isinstance(self.stop, list) else [self.stop]
        return GenerationParams(
            request_id=RequestId(f"{id_prefix}-{uuid.uuid4().hex}"),
            model=self.model,
            prompt=prompt,
            prompt_param=prompt_param,
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            seed=self.seed,
            stop=tuple(stop or ()),
            ignore_eos=self.ignore_eos,
            min_tokens=self.min_tokens,
        )

    def _unsupported(self, max_tokens: int | None) -> tuple[str, str] | None:
        """(field, what to do) for the first field set to something Vigil cannot honour."""
        if self.n != 1:
            return "n", "only n=1 is supported; send several requests instead"
        if self.presence_penalty != 0.0:
            return "presence_penalty", "penalties are not supported; leave it at 0"
        if self.frequency_penalty != 0.0:
            return "frequency_penalty", "penalties are not supported; leave it at 0"
        if self.logprobs:
            return "logprobs", "log probabilities are not supported; leave it false"
        if max_tokens is not None and self.min_tokens > max_tokens:
            return "min_tokens", f"min_tokens ({self.min_tokens}) must not exceed max_tokens"
        return None


class ChatCompletionRequest(SamplingFields, kw_only=True, forbid_unknown_fields=True):
    messages: Annotated[list[ChatMessageIn], Meta(min_length=1)]
    max_completion_tokens: PositiveInt | None = None

    def params(self) -> GenerationParams:
        messages = tuple(
            ChatMessage(m.role if m.role != "developer" else "system", m.text())
            for m in self.messages
        )
        max_tokens = self.max_completion_tokens or self.max_tokens
        return self._params("chatcmpl", ChatPrompt(messages), "messages", max_tokens)


class CompletionRequest(SamplingFields, kw_only=True, forbid_unknown_fields=True):
    prompt: Annotated[str, Meta(min_length=1)] | Annotated[list[int], Meta(min_length=1)]
    echo: bool = False

    def params(self) -> GenerationParams:
        if self.echo:
            raise InvalidRequest(
                "echo is not supported; leave it false", param="echo", code="unsupported_parameter"
            )
        if isinstance(self.prompt, str):
            prompt: Prompt = TextPrompt(self.prompt)
        else:
            prompt = TokenPrompt(tuple(self.prompt))
        return self._params("cmpl", prompt, "prompt", self.max_tokens)


class EmbeddingRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    model: Annotated[str, Meta(min_length=1)]
    input: (
        Annotated[str, Meta(min_length=1)]
        | Annotated[list[Annotated[str, Meta(min_length=1)]], Meta(min_length=1, max_length=2048)]
    )
    # The openai client asks for base64 unless told otherwise, and decodes it itself.
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


# ---- responses ------------------------------------------------------------


class Usage(Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatMessageOut(Struct):
    role: Literal["assistant"]
    content: str


FinishReasonName = Literal["stop", "length"]


class ChatChoice(Struct):
    index: int
    message: ChatMessageOut
    finish_reason: FinishReasonName | None
    logprobs: None = None


class ChatCompletion(Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    object: Literal["chat.completion"] = "chat.completion"


class CompletionChoice(Struct):
    index: int
    text: str
    finish_reason: FinishReasonName | None
    logprobs: None = None


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


class ModelCard(Struct):
    id: str
    created: int
    owned_by: str
    object: Literal["model"] = "model"


class ModelList(Struct):
    data: list[ModelCard]
    object: Literal["list"] = "list"


# ---- streamed chunks (one per SSE message) --------------------------------


class ChatDelta(Struct, omit_defaults=True):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(Struct):
    index: int
    delta: ChatDelta
    finish_reason: FinishReasonName | None
    logprobs: None = None


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
