"""A generation's prompt made ready for an engine: refused when too large to be worth
tokenizing, rendered with the tools it offers (the chat template's own tools section, or
gateway/tool_formats.py's default), tokenized once off the event loop, fitted to the
context once (the one call of the context rule, engine/limits.py, for a request; the
worker trusts its result) and, for n choices, to the KV cache they share, and the
sampling the request runs with.

Which context a prompt is fitted to depends on where it runs (placement.py): the
tokenizer stops counting past the longest context of the version's engines, and the
replica chosen gives the limits the rest of the request is fitted to.
"""

from __future__ import annotations

import asyncio
from typing import Any

from vigil.engine.limits import ContextLimit, RequestRejected, fit_request
from vigil.engine.request import Constraint, SamplingParams
from vigil.engine.tokenizer import ChatTemplateError, Tokenizer, TooManyTokens
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.errors import InvalidRequest
from vigil.platform.gateway.params import (
    ChatPrompt,
    FunctionTool,
    GenerationParams,
    Prompt,
    TextPrompt,
    TokenPrompt,
)
from vigil.platform.gateway.tool_formats import ToolFormat, default_rendering
from vigil.platform.wire.worker import SlotLimits


def check_prompt_size(prompt: Prompt, max_chars: int, param: str) -> None:
    """Refuse a prompt too large to be worth tokenizing (the context window would refuse
    it anyway), before any work is spent on it."""
    if isinstance(prompt, ChatPrompt):
        size = sum(
            len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in prompt.messages
        )
    else:
        size = len(prompt.text) if isinstance(prompt, TextPrompt) else len(prompt.ids)
    if size > max_chars:
        unit = "token ids" if isinstance(prompt, TokenPrompt) else "characters"
        raise InvalidRequest(
            f"'{param}' holds {size} {unit}, over the {max_chars} this server takes in one "
            "request; shorten it.",
            param=param,
            code="prompt_too_large",
        )


def prompt_ids(
    prompt: Prompt,
    tokenizer: Tokenizer,
    param: str,
    max_tokens: int | None = None,
    tools: tuple[FunctionTool, ...] = (),
    fmt: ToolFormat = ToolFormat.HERMES,
) -> list[int]:
    """The prompt's token ids; TooManyTokens when there are more than `max_tokens`.
    `tools`: the functions a chat offers, in format `fmt` unless its template renders
    them itself."""
    if isinstance(prompt, ChatPrompt):
        try:
            text = render_chat(prompt, tokenizer, tools, fmt)
        except ChatTemplateError as exc:
            raise InvalidRequest(str(exc), param=param) from exc
        return tokenizer.encode(text, max_tokens)
    if isinstance(prompt, TextPrompt):
        return tokenizer.encode(prompt.text, max_tokens)
    if max_tokens is not None and len(prompt.ids) > max_tokens:
        raise TooManyTokens(len(prompt.ids))
    vocab = tokenizer.vocab_size
    bad = next((t for t in prompt.ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise InvalidRequest(
            f"token id {bad} in '{param}' is outside this model's vocabulary (0 to {vocab - 1})",
            param=param,
        )
    return list(prompt.ids)


def render_chat(
    prompt: ChatPrompt, tokenizer: Tokenizer, tools: tuple[FunctionTool, ...], fmt: ToolFormat
) -> str:
    messages = prompt.messages
    if tokenizer.template_renders_tools:
        return tokenizer.render_chat(messages, [t.spec() for t in tools] if tools else None)
    if tools or any(m.tool_calls or m.role == "tool" for m in messages):
        messages = default_rendering(fmt, messages, tools).messages
    return tokenizer.render_chat(messages)


def sampling(
    params: GenerationParams,
    version: VersionRef,
    max_tokens: int,
    constraint: Constraint | None = None,
) -> SamplingParams:
    """The request's sampling, with the version's own defaults where the request is silent."""
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=_pick(params.temperature, version.param("temperature"), 1.0),
        top_k=max(0, _pick(params.top_k, version.param("top_k"), 0)),
        top_p=_pick(params.top_p, version.param("top_p"), 1.0),
        seed=params.seed,
        stop=params.stop or tuple(version.param("stop", ())),
        ignore_eos=params.ignore_eos,
        min_tokens=params.min_tokens,
        constraint=constraint,
        logprobs=params.logprobs,
        logit_bias=params.logit_bias,
        n=params.n,
        prompt_logprobs=params.prompt_logprobs,
    )


def _pick(requested: Any, version_default: Any, default: Any) -> Any:
    if requested is not None:
        return requested
    return default if version_default is None else version_default


async def tokenize(
    params: GenerationParams, tokenizer: Tokenizer, ceiling: int | None, fmt: ToolFormat
) -> list[int]:
    """The prompt's ids, counted off the event loop: a long prompt takes seconds to
    tokenize, and every other request, stream and probe of this gateway would wait for
    it. A prompt over `ceiling` (the longest context any engine of the version offers)
    is refused as soon as the count passes it."""
    tools = params.tools if params.offers_tools else ()
    try:
        return await asyncio.to_thread(
            prompt_ids, params.prompt, tokenizer, params.prompt_param, ceiling, tools, fmt
        )
    except TooManyTokens as exc:
        assert ceiling is not None
        fit(exc.num_tokens, params, ContextLimit(ceiling))  # raises: over the ceiling
        raise AssertionError("a prompt over every context passed the context rule") from exc


def fit_to(
    num_prompt_tokens: int,
    params: GenerationParams,
    spec: DeploymentSpec,
    version: VersionRef,
    limits: SlotLimits,
    long_pool: bool,
) -> int:
    """The max_tokens the request runs with on an engine of these limits, within the
    deployment's caps (a long-prompt pool lifts the prompt cap) and, when the request set
    none, the version's default."""
    caps = ContextLimit(
        min(limits.max_model_len, limits.kv_capacity_tokens),
        max_prompt_tokens=None if long_pool else spec.max_prompt_tokens,
        max_output_tokens=spec.max_tokens,
    )
    max_tokens = fit(num_prompt_tokens, params, caps)
    default_cap = version.param("max_tokens")
    if params.max_tokens is None and default_cap is not None:  # the request set none
        max_tokens = min(max_tokens, default_cap)
    return fit_choices(num_prompt_tokens, max_tokens, params, limits.kv_capacity_tokens)


def fit_choices(
    num_prompt_tokens: int, max_tokens: int, params: GenerationParams, kv_capacity_tokens: int
) -> int:
    """n choices hold the prompt once (its blocks are shared) and n outputs at once: all
    must fit the KV cache together. A request that set no max_tokens gets what the cache
    leaves each choice; one that set too many for its n is refused."""
    n = params.n
    room = (kv_capacity_tokens - num_prompt_tokens) // n
    if max_tokens <= room:
        return max_tokens
    if params.max_tokens is None and room >= 1:
        return room
    raise InvalidRequest(
        f"n={n} choices of up to {max_tokens} tokens after a {num_prompt_tokens}-token "
        f"prompt need {num_prompt_tokens + n * max_tokens} tokens of KV cache at once; this "
        f"model's engine holds {kv_capacity_tokens}. Lower n or max_tokens.",
        param="n",
        code="context_length_exceeded",
    )


def check_min_tokens(params: GenerationParams, max_tokens: int) -> None:
    if params.min_tokens > max_tokens:
        raise InvalidRequest(
            f"min_tokens ({params.min_tokens}) is over the {max_tokens} tokens this "
            "request may generate; lower min_tokens.",
            param="min_tokens",
        )


def fit(num_prompt_tokens: int, params: GenerationParams, limit: ContextLimit) -> int:
    """The context rule, its refusal naming the request's own field."""
    try:
        return fit_request(num_prompt_tokens, params.max_tokens, limit)
    except RequestRejected as exc:
        param = params.prompt_param if exc.param == "prompt" else exc.param
        raise InvalidRequest(str(exc), param=param, code="context_length_exceeded") from None
