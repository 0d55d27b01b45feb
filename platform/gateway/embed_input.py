"""Texts to embed made ready for an engine: refused when too large to be worth
tokenizing, tokenized once off the event loop with the version's own tokenizer, each
within the model's window (the one call of that rule, engine/limits.py, for a request;
the worker embeds the ids as they come)."""

from __future__ import annotations

import asyncio

from vigil.engine.limits import RequestRejected, check_embedding_inputs
from vigil.engine.tokenizer import Tokenizer, TooManyTokens
from vigil.platform.errors import InvalidRequest


def check_input_size(texts: list[str], max_chars: int) -> None:
    """Each input, and all of them together, within max_chars: before any time is spent
    counting their tokens. Errors about one name it as `input[i]`."""
    over = next((i for i, t in enumerate(texts) if len(t) > max_chars), None)
    total = sum(len(t) for t in texts)
    if over is None and total <= max_chars:
        return
    param = "input" if over is None else f"input[{over}]"
    size = total if over is None else len(texts[over])
    raise InvalidRequest(
        f"'{param}' holds {size} characters, over the {max_chars} this server takes "
        "in one request; shorten or split it.",
        param=param,
        code="input_too_large",
    )


def input_ids(texts: list[str], tokenizer: Tokenizer) -> list[list[int]]:
    """Each text's ids, [CLS] and [SEP] included; a text over the model's window is
    refused as soon as its count passes it."""
    window = tokenizer.max_input_tokens
    assert window is not None, "an embedding model's tokenizer carries its window"
    rows: list[list[int]] = []
    for text in texts:
        try:
            rows.append(tokenizer.encode(text, window))
        except TooManyTokens as exc:
            try:
                check_embedding_inputs([*map(len, rows), exc.num_tokens], window)
            except RequestRejected as rejected:
                raise InvalidRequest(
                    str(rejected), param=rejected.param, code="context_length_exceeded"
                ) from None
            raise AssertionError("a text over the window passed the window's rule") from exc
    return rows


async def tokenize_inputs(texts: list[str], tokenizer: Tokenizer) -> list[list[int]]:
    """input_ids, off the event loop: long inputs take seconds to tokenize, and every
    other request, stream and probe of this gateway would wait for them."""
    return await asyncio.to_thread(input_ids, texts, tokenizer)
