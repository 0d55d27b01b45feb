"""Text <-> token ids, and the chat template, both from the model's own files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment

GIL_FREE_ENCODE_CHARS = 4096  # longer texts are encoded without holding the GIL


class TooManyTokens(ValueError):
    def __init__(self, num_tokens: int) -> None:
        super().__init__(f"{num_tokens} tokens")
        self.num_tokens = num_tokens


class ChatTemplateError(ValueError):
    """The messages do not fit the model's chat template (raised by the template itself)."""


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str


class Tokenizer:
    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        eos_token_ids: frozenset[int],
        chat_template: str | None,
        bos_token: str | None = None,
        eos_token: str | None = None,
        add_special_tokens: bool = False,
        max_input_tokens: int | None = None,
    ) -> None:
        """`max_input_tokens`: the most tokens one input may hold where the model has a
        window of its own (an encoder's); None for a decoder, whose context is fitted
        per request (engine/limits.py)."""
        self.backend = backend
        self.eos_token_ids = eos_token_ids
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.add_special_tokens = add_special_tokens
        self.max_input_tokens = max_input_tokens
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self._template = _compile(chat_template) if chat_template else None

    @property
    def has_chat_template(self) -> bool:
        return self._template is not None

    def encode(self, text: str, max_tokens: int | None = None) -> list[int]:
        """The text's token ids; with `max_tokens`, a text of more tokens raises
        TooManyTokens before its ids are turned into Python objects (a megabyte of text is
        300,000 of them, built while no other thread runs)."""
        # `encode` holds the GIL throughout (a megabyte: seconds in which no other thread
        # runs, the gateway's event loop included); `encode_batch` releases it.
        if len(text) < GIL_FREE_ENCODE_CHARS:
            encoding = self.backend.encode(text, add_special_tokens=self.add_special_tokens)
        else:
            [encoding] = self.backend.encode_batch(
                [text], add_special_tokens=self.add_special_tokens
            )
        if max_tokens is not None and len(encoding) > max_tokens:
            raise TooManyTokens(len(encoding))
        return list(encoding.ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.backend.decode(list(ids), skip_special_tokens=True))

    def render_chat(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt text for a conversation, ending where the assistant's reply begins."""
        if self._template is None:
            raise ChatTemplateError("this model has no chat template; use /v1/completions")
        try:
            return self._template.render(
                messages=[{"role": m.role, "content": m.content} for m in messages],
                add_generation_prompt=True,
                bos_token=self.bos_token or "",
                eos_token=self.eos_token or "",
            )
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"chat template rejected the messages: {exc}") from exc


def _raise_exception(message: str) -> Any:
    raise ChatTemplateError(message)


def _compile(source: str) -> jinja2.Template:
    # The same environment settings as Hugging Face's apply_chat_template, so
    # templates written for it render identically.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise_exception
    return env.from_string(source)
