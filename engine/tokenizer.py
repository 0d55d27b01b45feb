"""Text <-> token ids, and the chat template, both from the model's own files."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
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
class ToolCall:
    """A function call an assistant message made, as the client sends it back."""

    id: str
    name: str
    arguments: str  # JSON text


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant's calls
    tool_call_id: str | None = None  # a tool message: the call it answers


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
        self.chat_template = chat_template or ""
        self._token_bytes: dict[int, bytes] = {}
        self._byte_level = isinstance(backend.decoder, tokenizers.decoders.ByteLevel)

    @property
    def has_chat_template(self) -> bool:
        return self._template is not None

    @property
    def template_renders_tools(self) -> bool:
        """Whether the chat template has a tools section of its own (it reads `tools`)."""
        return "tools" in self.chat_template

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for, which may be part of a UTF-8 character (so no
        text of its own): byte-level BPE maps each byte to a printable character, and
        other vocabularies spell raw bytes as <0xNN>."""
        found = self._token_bytes.get(token_id)
        if found is None:
            piece = self.backend.id_to_token(token_id) or ""
            if self._byte_level:
                found = bytes(_BYTE_OF.get(c, 0) for c in piece)
            elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                found = bytes([int(piece[3:5], 16)])
            else:
                found = piece.replace("\u2581", " ").encode()
            self._token_bytes[token_id] = found
        return found

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

    def render_chat(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None = None
    ) -> str:
        """The prompt text for a conversation, ending where the assistant's reply begins.
        `tools` (OpenAI's {"type": "function", "function": {...}} objects) go to a
        template that renders them; messages with tool calls and tool results are passed
        as Hugging Face's templates read them (arguments as objects)."""
        if self._template is None:
            raise ChatTemplateError("this model has no chat template; use /v1/completions")
        extra = {} if tools is None else {"tools": list(tools)}
        try:
            return self._template.render(
                messages=[_message(m) for m in messages],
                add_generation_prompt=True,
                bos_token=self.bos_token or "",
                eos_token=self.eos_token or "",
                **extra,
            )
        except (jinja2.TemplateError, TypeError) as exc:
            raise ChatTemplateError(f"chat template rejected the messages: {exc}") from exc


def _message(m: ChatMessage) -> dict[str, Any]:
    message: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments(c.arguments)},
            }
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        message["tool_call_id"] = m.tool_call_id
    return message


def _arguments(text: str) -> Any:
    """Arguments as an object, as templates expect; the text itself if it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return text


# GPT-2's byte-level alphabet: bytes that print as themselves keep their character; the
# rest (controls, space, the upper half) are shifted to 256 and up, in order.
_PRINTABLE = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
_BYTE_OF = {
    chr(c): b
    for b, c in zip(
        [*_PRINTABLE, *(b for b in range(256) if b not in _PRINTABLE)],
        [*_PRINTABLE, *range(256, 256 + 256 - len(_PRINTABLE))],
        strict=True,
    )
}


def _raise_exception(message: str) -> Any:
    raise ChatTemplateError(message)


def _compile(source: str) -> jinja2.Template:
    # The same environment settings as Hugging Face's apply_chat_template, so
    # templates written for it render identically.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise_exception
    return env.from_string(source)
