"""The tokenizer refuses a text over a token limit without building its ids."""

from __future__ import annotations

import pytest

from vigil.engine.tokenizer import Tokenizer, TooManyTokens


def test_a_text_over_the_limit_is_counted_not_returned(smollm2_tokenizer: Tokenizer) -> None:
    short = "The capital of France is Paris."
    ids = smollm2_tokenizer.encode(short)
    assert smollm2_tokenizer.encode(short, max_tokens=len(ids)) == ids
    with pytest.raises(TooManyTokens) as caught:
        smollm2_tokenizer.encode(short, max_tokens=len(ids) - 1)
    assert caught.value.num_tokens == len(ids)
    long = "word " * 5000  # past the length at which encoding leaves the GIL free
    n = len(smollm2_tokenizer.encode(long))
    assert n > 5000 - 1 and smollm2_tokenizer.encode(
        long, max_tokens=n
    ) == smollm2_tokenizer.encode(long)
    with pytest.raises(TooManyTokens) as caught:
        smollm2_tokenizer.encode(long, max_tokens=n - 1)
    assert caught.value.num_tokens == n


@pytest.mark.parametrize("text", ["Hello world", "café 日本 ✓", "\n\n  x", "naïve 🙂!"])
def test_each_tokens_bytes_join_into_the_texts_utf8(
    smollm2_tokenizer: Tokenizer, text: str
) -> None:
    """A token may hold part of a character: its bytes are exact where its text is not."""
    ids = smollm2_tokenizer.encode(text)
    assert b"".join(smollm2_tokenizer.token_bytes(i) for i in ids) == text.encode()
