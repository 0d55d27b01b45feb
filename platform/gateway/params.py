"""A generation as the gateway is asked for it: the prompt in one of three forms, and
sampling choices that fall back on the serving version's defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vigil.engine.request import RequestId, SamplingParams
from vigil.engine.tokenizer import ChatMessage, ChatTemplateError, Tokenizer, TooManyTokens
from vigil.platform.control.specs import VersionRef
from vigil.platform.errors import InvalidRequest


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
