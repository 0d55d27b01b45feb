"""A generation's prompt made ready for an engine: refused when too large to be worth
tokenizing, tokenized once off the event loop, fitted to the context once (the one call
of the context rule, engine/limits.py, for a request; the worker trusts its result), and
the sampling the request runs with.

Which context a prompt is fitted to depends on where it runs (placement.py): the
tokenizer stops counting past the longest context of the version's engines, and the
replica chosen gives the limits the rest of the request is fitted to.
"""

from __future__ import annotations

import asyncio
from typing import Any

from vigil.engine.limits import ContextLimit, RequestRejected, fit_request
from vigil.engine.request import SamplingParams
from vigil.engine.tokenizer import ChatTemplateError, Tokenizer, TooManyTokens
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.errors import InvalidRequest
from vigil.platform.gateway.params import (
    ChatPrompt,
    GenerationParams,
    Prompt,
    TextPrompt,
    TokenPrompt,
)
from vigil.platform.wire.worker import SlotLimits


def check_prompt_size(prompt: Prompt, max_chars: int, param: str) -> None:
    """Refuse a prompt too large to be worth tokenizing (the context window would refuse
    it anyway), before any work is spent on it."""
    if isinstance(prompt, ChatPrompt):
        size = sum(len(m.content) for m in prompt.messages)
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
    prompt: Prompt, tokenizer: Tokenizer, param: str, max_tokens: int | None = None
) -> list[int]:
    """The prompt's token ids; TooManyTokens when there are more than `max_tokens`."""
    if isinstance(prompt, ChatPrompt):
        try:
            text = tokenizer.render_chat(list(prompt.messages))
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


def sampling(params: GenerationParams, version: VersionRef, max_tokens: int) -> SamplingParams:
    """The request's sampling, with the version's own defaults where the request is silent."""
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=_pick(params.temperature, version.param("temperature"), 1.0),
        top_k=max(0, _pick(params.top_k, version.param("top_k"), 0)),
        top_p=_pick(params.top_p, version.param("top_p"), 1.0),
        seed=params.seed,
        stop=params.stop,
        ignore_eos=params.ignore_eos,
        min_tokens=params.min_tokens,
    )


def _pick(requested: Any, version_default: Any, default: Any) -> Any:
    if requested is not None:
        return requested
    return default if version_default is None else version_default


async def tokenize(
    params: GenerationParams, tokenizer: Tokenizer, ceiling: int | None
) -> list[int]:
    """The prompt's ids, counted off the event loop: a long prompt takes seconds to
    tokenize, and every other request, stream and probe of this gateway would wait for
    it. A prompt over `ceiling` (the longest context any engine of the version offers)
    is refused as soon as the count passes it."""
    try:
        return await asyncio.to_thread(
            prompt_ids, params.prompt, tokenizer, params.prompt_param, ceiling
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
    return max_tokens


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
