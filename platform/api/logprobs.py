"""The engine's logprobs in OpenAI's two shapes.

    chat         per token: {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}
    completions  the legacy shape, lists side by side: tokens, token_logprobs,
                 top_logprobs ({token: logprob}, the chosen token among them),
                 text_offset (where each token starts in the choice's text)

A token's text is its bytes as UTF-8, with U+FFFD for a byte that only begins or ends a
character (its `bytes` are exact). A logprob too small for a float is -9999.0, as
OpenAI writes it (JSON has no -Infinity). Echoed prompts start with a token that has
nothing before it: its logprob and alternatives are null.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from vigil.platform.api.openai_responses import (
    ChoiceLogprobs,
    LegacyLogprobs,
    TokenLogprob,
    TopLogprob,
)
from vigil.platform.gateway.generation import SampledLogprobs

FLOOR = -9999.0
TokenBytes = Callable[[int], bytes]


def _value(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else FLOOR


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def chat_logprobs(records: Sequence[SampledLogprobs], token_bytes: TokenBytes) -> ChoiceLogprobs:
    content = []
    for r in records:
        raw = token_bytes(r.token_id)
        top = [
            TopLogprob(_text(b := token_bytes(t.token_id)), _value(t.logprob), list(b))
            for t in r.top
        ]
        content.append(TokenLogprob(_text(raw), _value(r.logprob), list(raw), top))
    return ChoiceLogprobs(content)


class LegacyWriter:
    """Legacy logprobs of one choice, written as its text grows (the offsets run on
    across a stream's chunks)."""

    def __init__(self, token_bytes: TokenBytes, offset: int = 0) -> None:
        self.token_bytes = token_bytes
        self.offset = offset

    def echoed_prompt(
        self, prompt_ids: Sequence[int], records: Sequence[SampledLogprobs]
    ) -> LegacyLogprobs:
        """The prompt's tokens: the first with nulls, each other with its record."""
        first = self._write([prompt_ids[0]], [None])
        rest = self._write([r.token_id for r in records], list(records))
        return joined(first, rest)

    def tokens(self, records: Sequence[SampledLogprobs]) -> LegacyLogprobs:
        return self._write([r.token_id for r in records], list(records))

    def _write(
        self, ids: Sequence[int], records: Sequence[SampledLogprobs | None]
    ) -> LegacyLogprobs:
        out = LegacyLogprobs([], [], [], [])
        for token_id, r in zip(ids, records, strict=True):
            text = _text(self.token_bytes(token_id))
            out.tokens.append(text)
            out.text_offset.append(self.offset)
            self.offset += len(text)
            if r is None:
                out.token_logprobs.append(None)
                out.top_logprobs.append(None)
                continue
            out.token_logprobs.append(_value(r.logprob))
            top = {_text(self.token_bytes(t.token_id)): _value(t.logprob) for t in r.top}
            top.setdefault(text, _value(r.logprob))
            out.top_logprobs.append(top)
        return out


def joined(a: LegacyLogprobs, b: LegacyLogprobs) -> LegacyLogprobs:
    return LegacyLogprobs(
        a.tokens + b.tokens,
        a.token_logprobs + b.token_logprobs,
        a.top_logprobs + b.top_logprobs,
        a.text_offset + b.text_offset,
    )
