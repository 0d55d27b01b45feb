"""Streaming detokenisation with the SmolLM2 byte-level BPE: never half a character,
never any part of a stop string, and nothing lost."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vigil.engine.detokenizer import IncrementalDetokenizer
from vigil.engine.tokenizer import Tokenizer

REPLACEMENT = "\ufffd"
# Emoji and CJK that this tokenizer splits into several byte tokens each.
MULTIBYTE_TEXTS = [
    "Hello 👋 world 🌍!",
    "日本語のテキスト",
    "café ☕ naïve 🎉🎉 done",
    "Mixed: 你好, мир, 🙂 and 😀😀😀.",
]


def stream(tok: Tokenizer, ids: list[int], stop: tuple[str, ...] = ()) -> tuple[list[str], str]:
    """Push ids one at a time until a stop string matches; the pieces and finish()."""
    detok = IncrementalDetokenizer(tok, stop)
    pieces = []
    for token_id in ids:
        pieces.append(detok.push(token_id))
        if detok.stopped:
            break
    return pieces, detok.finish()


def test_texts_split_characters_across_tokens(smollm2_tokenizer: Tokenizer) -> None:
    # Guards the tests below: each text really has a character spread over tokens.
    for text in MULTIBYTE_TEXTS:
        ids = smollm2_tokenizer.encode(text)
        assert any(REPLACEMENT in smollm2_tokenizer.decode([i]) for i in ids), text


def test_streaming_never_emits_a_broken_character(smollm2_tokenizer: Tokenizer) -> None:
    for text in MULTIBYTE_TEXTS:
        ids = smollm2_tokenizer.encode(text)
        pieces, rest = stream(smollm2_tokenizer, ids)
        assert not any(REPLACEMENT in piece for piece in [*pieces, rest]), pieces
        assert "".join(pieces) + rest == smollm2_tokenizer.decode(ids) == text


def test_character_is_emitted_with_the_token_that_completes_it(
    smollm2_tokenizer: Tokenizer,
) -> None:
    ids = smollm2_tokenizer.encode("Hello 👋 world")
    assert len(ids) == 5  # 'Hello', then 👋 as three byte tokens, then ' world'
    pieces, rest = stream(smollm2_tokenizer, ids)
    assert pieces == ["Hello", "", "", " 👋", " world"]
    assert rest == ""


def test_finish_releases_an_incomplete_trailing_character(smollm2_tokenizer: Tokenizer) -> None:
    # The sequence ends (say, max_tokens) two bytes into a four-byte emoji.
    ids = smollm2_tokenizer.encode("Hi 👋")[:-1]
    pieces, rest = stream(smollm2_tokenizer, ids)
    assert "".join(pieces) == "Hi"
    assert "".join(pieces) + rest == smollm2_tokenizer.decode(ids)
    assert rest.endswith(REPLACEMENT)  # what the decoder shows for the broken bytes


def test_special_tokens_add_no_text(smollm2_tokenizer: Tokenizer) -> None:
    ids = smollm2_tokenizer.encode("Hi<|im_end|> there")
    assert 2 in ids  # <|im_end|> is one special token
    pieces, rest = stream(smollm2_tokenizer, ids)
    assert "".join(pieces) + rest == "Hi there"


def test_stop_string_is_excluded_from_output(smollm2_tokenizer: Tokenizer) -> None:
    ids = smollm2_tokenizer.encode("The capital of France is Paris. It is big.")
    pieces, rest = stream(smollm2_tokenizer, ids, stop=("Paris",))
    assert "".join(pieces) + rest == "The capital of France is "
    assert len(pieces) == 6  # stopped at ' Paris', the sixth token


def test_stop_string_inside_one_token_cuts_that_token(smollm2_tokenizer: Tokenizer) -> None:
    ids = smollm2_tokenizer.encode("The capital of France is Paris.")
    pieces, rest = stream(smollm2_tokenizer, ids, stop=("ari",))
    assert "".join(pieces) + rest == "The capital of France is P"


def test_text_that_may_begin_a_stop_string_is_held_back_then_released(
    smollm2_tokenizer: Tokenizer,
) -> None:
    ids = smollm2_tokenizer.encode("Say <b> now")
    assert [smollm2_tokenizer.decode([i]) for i in ids] == ["Say", " <", "b", ">", " now"]
    pieces, rest = stream(smollm2_tokenizer, ids, stop=("<stop>",))
    # '<' could begin '<stop>': held back until 'b' rules that out.
    assert pieces == ["Say", " ", "<b", ">", " now"]
    assert rest == ""


def test_finish_releases_text_held_back_for_a_stop_string(smollm2_tokenizer: Tokenizer) -> None:
    ids = smollm2_tokenizer.encode("Say <")
    pieces, rest = stream(smollm2_tokenizer, ids, stop=("<stop>",))
    assert pieces == ["Say", " "]
    assert rest == "<"  # the sequence ended otherwise: '<' was never part of a stop


def test_stop_string_spanning_several_tokens_is_found(smollm2_tokenizer: Tokenizer) -> None:
    ids = smollm2_tokenizer.encode("abc STOP def")
    assert [smollm2_tokenizer.decode([i]) for i in ids] == ["abc", " ST", "OP", " def"]
    pieces, rest = stream(smollm2_tokenizer, ids, stop=("STOP",))
    assert pieces == ["abc", " ", ""]  # 'ST' held back, then dropped with 'OP'
    assert rest == ""
    # Starting and ending inside tokens, across three of them.
    ids = smollm2_tokenizer.encode("The capital of France is Paris.")
    pieces, rest = stream(smollm2_tokenizer, ids, stop=("pital of Fr",))
    assert "".join(pieces) + rest == "The ca"


def test_earliest_of_several_stop_strings_wins(smollm2_tokenizer: Tokenizer) -> None:
    ids = smollm2_tokenizer.encode("The capital of France is Paris.")
    # ' Paris' completes both at once; the one that starts first cuts, whatever the order.
    pieces, rest = stream(smollm2_tokenizer, ids, stop=("Paris", "is Paris"))
    assert "".join(pieces) + rest == "The capital of France "


def test_stop_string_inside_a_multibyte_text(smollm2_tokenizer: Tokenizer) -> None:
    ids = smollm2_tokenizer.encode("café ☕ naïve 🎉🎉 done")
    pieces, rest = stream(smollm2_tokenizer, ids, stop=("🎉",))
    assert "".join(pieces) + rest == "café ☕ naïve "
    assert not any(REPLACEMENT in piece for piece in pieces)


def _expected_with_stops(tok: Tokenizer, ids: list[int], stop: tuple[str, ...]) -> str:
    """Reference: after each token that ends on a whole character, look for the stop
    strings in the text so far; the first time any occurs, cut at the earliest."""
    for end in range(1, len(ids) + 1):
        text = tok.decode(ids[:end])
        if text.endswith(REPLACEMENT):
            continue
        found = [i for s in stop if (i := text.find(s)) != -1]
        if found:
            return text[: min(found)]
    return tok.decode(ids)


@settings(max_examples=150, deadline=None)
@given(
    text=st.sampled_from(
        [*MULTIBYTE_TEXTS, "The capital of France is Paris.", "aaa ab aab abab aaab"]
    ),
    cuts=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 6)), min_size=0, max_size=3),
    extra=st.lists(st.text(alphabet="ab 🎉<", min_size=1, max_size=4), max_size=2),
)
def test_streamed_text_is_the_text_up_to_the_first_stop(
    smollm2_tokenizer: Tokenizer, text: str, cuts: list[tuple[int, int]], extra: list[str]
) -> None:
    # Stop strings taken from the text itself (so they match, often mid-token) and a few
    # random ones (which may match, partially match, or never match).
    stop = tuple(text[i : i + n] for i, n in cuts if text[i : i + n]) + tuple(extra)
    ids = smollm2_tokenizer.encode(text)
    pieces, rest = stream(smollm2_tokenizer, ids, stop)
    assert "".join(pieces) + rest == _expected_with_stops(smollm2_tokenizer, ids, stop)
    assert not any(REPLACEMENT in piece for piece in pieces)
