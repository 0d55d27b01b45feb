"""A generation as the gateway is asked for it, made at the API edge: the prompt in one
of three forms, and sampling choices that fall back on the serving version's defaults
(gateway/prompt.py applies them)."""

from __future__ import annotations

from dataclasses import dataclass

from vigil.engine.request import RequestId
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
