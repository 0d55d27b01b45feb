"""Request bodies of the OpenAI-compatible API (their nested parts: openai_inputs.py;
responses: openai_responses.py).

Unknown fields are refused (a typo must not be silently ignored); fields that
OpenAI defines but Vigil does not implement are accepted only at their
neutral value and otherwise get a 400 that names them (see `unsupported`).
`metadata` and `store`, which OpenAI documents as optional bookkeeping, are
accepted and ignored: Vigil stores no completions.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from vigil.engine.request import MAX_TOP_LOGPROBS, SEED_MAX, RequestId
from vigil.platform.api.openai_inputs import (
    ChatMessageIn,
    JsonSchema,
    NamedToolChoice,
    ResponseFormat,
    ToolIn,
    output_constraint,
)
from vigil.platform.control.versions.checks import MAX_STOP_STRINGS
from vigil.platform.errors import InvalidRequest
from vigil.platform.gateway.params import (
    ChatPrompt,
    FunctionTool,
    GenerationParams,
    Prompt,
    TextPrompt,
    TokenPrompt,
    ToolChoice,
    ToolChoiceMode,
)

NonNegativeFloat = Annotated[float, Meta(ge=0.0)]
PositiveInt = Annotated[int, Meta(ge=1)]
Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, Meta(gt=0.0, le=1.0)]
TopK = Annotated[int, Meta(ge=-1)]  # -1 or 0: no top-k cut (vLLM uses -1)
Seed = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
StopString = Annotated[str, Meta(min_length=1)]
StopStrings = StopString | Annotated[list[StopString], Meta(max_length=MAX_STOP_STRINGS)]
TopLogprobs = Annotated[int, Meta(ge=0, le=MAX_TOP_LOGPROBS)]
Bias = Annotated[float, Meta(ge=-100.0, le=100.0)]
MAX_TOOLS = 128  # as OpenAI


class StreamOptions(Struct, forbid_unknown_fields=True):
    include_usage: bool = False


class SamplingFields(Struct, kw_only=True, forbid_unknown_fields=True):
    """Fields shared by chat and text completions."""

    model: Annotated[str, Meta(min_length=1)]
    max_tokens: PositiveInt | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    seed: Seed | None = None  # choice i of n samples with seed + i
    stop: StopStrings | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: PositiveInt = 1  # at most the server's --max-choices
    user: str | None = None
    ignore_eos: bool = False
    min_tokens: Annotated[int, Meta(ge=0)] = 0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, Bias] | None = None  # token id (as a string) -> added to its logit
    response_format: ResponseFormat | None = None
    guided_json: JsonSchema | str | None = None  # vLLM's name for a json_schema format
    metadata: Annotated[dict[str, str], Meta(max_length=16)] | None = None  # ignored
    store: bool | None = None  # ignored: nothing is stored

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def _params(
        self,
        id_prefix: str,
        prompt: Prompt,
        prompt_param: str,
        max_tokens: int | None,
        max_choices: int,
        **more: Any,
    ) -> GenerationParams:
        """What the gateway is asked to generate, once every field is one Vigil honours."""
        problem = self._unsupported(max_tokens, max_choices)
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
            n=self.n,
            logit_bias=self._logit_bias(),
            response_format=output_constraint(self.response_format, self.guided_json),
            response_format_param="guided_json"
            if self.guided_json is not None
            else "response_format",
            **more,
        )

    def _unsupported(self, max_tokens: int | None, max_choices: int) -> tuple[str, str] | None:
        """(field, what to do) for the first field set to something Vigil cannot honour."""
        if self.n > max_choices:
            return "n", f"this server gives at most {max_choices} choices a request"
        if self.seed is not None and self.seed + self.n - 1 > SEED_MAX:
            return "seed", f"choice i samples with seed + i: keep seed + n - 1 <= {SEED_MAX}"
        if self.presence_penalty != 0.0:
            return "presence_penalty", "penalties are not supported; leave it at 0"
        if self.frequency_penalty != 0.0:
            return "frequency_penalty", "penalties are not supported; leave it at 0"
        if max_tokens is not None and self.min_tokens > max_tokens:
            return "min_tokens", f"min_tokens ({self.min_tokens}) must not exceed max_tokens"
        return None

    def _logit_bias(self) -> tuple[tuple[int, float], ...]:
        """Token ids (JSON keys are strings) with their bias; the engine checks the range."""
        pairs = []
        for key, bias in (self.logit_bias or {}).items():
            try:
                token_id = int(key)
            except ValueError:
                token_id = -1
            if token_id < 0 or not key.strip().isdigit():
                raise InvalidRequest(
                    f"logit_bias keys are token ids; {key!r} is not one.", param="logit_bias"
                )
            pairs.append((token_id, float(bias)))
        return tuple(sorted(pairs))


class ChatCompletionRequest(SamplingFields, kw_only=True, forbid_unknown_fields=True):
    messages: Annotated[list[ChatMessageIn], Meta(min_length=1)]
    max_completion_tokens: PositiveInt | None = None
    tools: Annotated[list[ToolIn], Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    logprobs: bool = False
    top_logprobs: TopLogprobs | None = None

    def params(self, max_choices: int) -> GenerationParams:
        messages = tuple(m.message(f"messages[{i}]") for i, m in enumerate(self.messages))
        max_tokens = self.max_completion_tokens or self.max_tokens
        if self.top_logprobs is not None and not self.logprobs:
            raise InvalidRequest("top_logprobs needs logprobs: true.", param="top_logprobs")
        return self._params(
            "chatcmpl",
            ChatPrompt(messages),
            "messages",
            max_tokens,
            max_choices,
            logprobs=(self.top_logprobs or 0) if self.logprobs else None,
            tools=self._tools(),
            tool_choice=self._tool_choice(),
            parallel_tool_calls=self.parallel_tool_calls,
        )

    def _tools(self) -> tuple[FunctionTool, ...]:
        tools = tuple(
            FunctionTool(t.function.name, t.function.description, t.function.parameters or {})
            for t in self.tools or ()
        )
        names = [t.name for t in tools]
        if len(set(names)) < len(names):
            raise InvalidRequest("Each tool needs a name of its own.", param="tools")
        return tools

    def _tool_choice(self) -> ToolChoice:
        choice = self.tool_choice
        if choice is None:
            return ToolChoice(ToolChoiceMode.AUTO if self.tools else ToolChoiceMode.NONE)
        if choice != "none" and not self.tools:
            raise InvalidRequest(
                "tool_choice needs tools: send the functions the model may call.",
                param="tool_choice",
            )
        if isinstance(choice, str):
            return ToolChoice(ToolChoiceMode(choice))
        names = [t.function.name for t in self.tools or ()]
        if choice.function.name not in names:
            raise InvalidRequest(
                f"tool_choice names the function {choice.function.name!r}, which is not "
                f"among the tools ({', '.join(names)}).",
                param="tool_choice",
            )
        return ToolChoice(ToolChoiceMode.FUNCTION, choice.function.name)


class CompletionRequest(SamplingFields, kw_only=True, forbid_unknown_fields=True):
    prompt: Annotated[str, Meta(min_length=1)] | Annotated[list[int], Meta(min_length=1)]
    echo: bool = False
    logprobs: TopLogprobs | None = None  # the legacy field: how many alternatives

    def params(self, max_choices: int) -> GenerationParams:
        if isinstance(self.prompt, str):
            prompt: Prompt = TextPrompt(self.prompt)
        else:
            prompt = TokenPrompt(tuple(self.prompt))
        # Echoed with logprobs: the prompt's own are computed too.
        prompt_logprobs = self.logprobs if self.echo else None
        return self._params(
            "cmpl",
            prompt,
            "prompt",
            self.max_tokens,
            max_choices,
            logprobs=self.logprobs,
            prompt_logprobs=prompt_logprobs,
        )


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
