"""SentencePiece tokenizers from a GGUF file (`tokenizer.ggml.model = llama`: Llama 2,
Mistral, Gemma, Phi-3), held to SentencePiece itself and to transformers' tokenizer of
the same model.

The test trains a tiny SentencePiece BPE model (byte fallback, Llama 2's settings) on
seeded pseudo-text and writes its vocabulary into a GGUF file as llama.cpp's converter
does (pieces, scores, token types); Vigil's tokenizer built from the file must give
SentencePiece's ids, and decode them to SentencePiece's text, on a few hundred strings
of words, digits, runs of spaces, newlines, and characters only bytes can spell."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import gguf
import pytest
import sentencepiece as spm
import transformers

from vigil.engine.detokenizer import IncrementalDetokenizer
from vigil.engine.loaders.gguf import GGUFFile
from vigil.engine.tokenizer import Tokenizer

SYLLABLES = ["ka", "to", "ri", "mon", "el", "as", "the", "ing", "qu", "st", "or", "an"]
# (control tokens' text, "</s>", is left out: SentencePiece reads it as text, Vigil, like
# llama.cpp rendering a chat, as the token: test_bos_is_added_and_control_tokens_match_whole)
RARE = ["ümlaut", "😀", "日本語", "naïve", "\t", "x=y+z", "3.14", "2048", "<0x41>", "<s"]


def pseudo_text(rng: random.Random, words: int) -> str:
    pieces = []
    for _ in range(words):
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3)))
        pieces.append(rng.choice(RARE) if rng.random() < 0.08 else word)
        pieces.append(rng.choice([" ", " ", " ", "  ", "\n", ", "]))
    return "".join(pieces).strip()


STRINGS = [pseudo_text(random.Random(i), random.Random(i).randint(1, 14)) for i in range(300)]
STRINGS += [" leading space", "  two leading", "", "\n\nnewlines first", "trailing  "]


def train(add_dummy_prefix: bool) -> bytes:
    rng = random.Random(1234)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(pseudo_text(rng, 40) for _ in range(300)),
        model_writer=model,
        model_type="bpe",
        vocab_size=400,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=add_dummy_prefix,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        user_defined_symbols=["<think>"],
        control_symbols=["[INST]", "[/INST]"],
        minloglevel=2,
    )
    return model.getvalue()


def write_vocabulary(path: Path, sp: spm.SentencePieceProcessor, arch: str, prefix: bool) -> None:
    """The tokenizer keys convert_hf_to_gguf.py writes for a SentencePiece model."""
    writer = gguf.GGUFWriter(str(path), arch)
    ids = range(sp.get_piece_size())
    writer.add_tokenizer_model("llama")
    writer.add_token_list([sp.id_to_piece(i) for i in ids])
    writer.add_token_scores([sp.get_score(i) for i in ids])
    writer.add_token_types([token_type(sp, i) for i in ids])
    writer.add_bos_token_id(sp.bos_id())
    writer.add_eos_token_id(sp.eos_id())
    writer.add_unk_token_id(sp.unk_id())
    writer.add_add_space_prefix(prefix)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()


def token_type(sp: spm.SentencePieceProcessor, i: int) -> gguf.TokenType:
    if sp.is_unknown(i):
        return gguf.TokenType.UNKNOWN
    if sp.is_control(i):
        return gguf.TokenType.CONTROL
    if sp.is_byte(i):
        return gguf.TokenType.BYTE
    if sp.id_to_piece(i) == "<think>":  # the user-defined symbol
        return gguf.TokenType.USER_DEFINED
    return gguf.TokenType.NORMAL


class Vocabulary:
    def __init__(self, folder: Path, arch: str, prefix: bool) -> None:
        self.arch, self.prefix = arch, prefix
        self.model = train(prefix)
        self.sp = spm.SentencePieceProcessor(model_proto=self.model)
        path = folder / f"{arch}.gguf"
        write_vocabulary(path, self.sp, arch, prefix)
        self.ours: Tokenizer = GGUFFile(path).tokenizer()


# Llama 2 / Mistral / Phi-3 put a space before the text; Gemma does not (and its
# files get transformers' respelling and merge order, which a SentencePiece BPE
# vocabulary, ordered by score, leaves as it is).
@pytest.fixture(scope="module", params=[("llama", True), ("gemma2", False)], ids=str)
def vocabulary(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Vocabulary:
    arch, prefix = request.param
    return Vocabulary(tmp_path_factory.mktemp(arch), arch, prefix)


def test_ids_and_text_equal_sentencepieces(vocabulary: Vocabulary) -> None:
    ours, sp = vocabulary.ours, vocabulary.sp
    for text in STRINGS:
        ids = ours.backend.encode(text, add_special_tokens=False).ids
        assert ids == sp.encode(text), text
        assert ours.decode(ids) == sp.decode(ids), text


def test_ids_equal_transformers_tokenizer_of_the_same_model(
    vocabulary: Vocabulary, tmp_path: Path
) -> None:
    """transformers' LlamaTokenizer (Metaspace, prefix "first") differs from SentencePiece
    and llama.cpp on text that starts with whitespace only ("  hi": ▁▁hi, not ▁▁▁hi)."""
    (tmp_path / "tokenizer.model").write_bytes(vocabulary.model)
    kind = "LlamaTokenizer" if vocabulary.prefix else "GemmaTokenizer"
    config = {"tokenizer_class": kind, "legacy": False, "add_bos_token": False}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    compared = [t for t in STRINGS if t and not t[0].isspace()]
    assert len(compared) >= 250
    for text in compared:
        ours = vocabulary.ours.backend.encode(text, add_special_tokens=False).ids
        assert ours == reference.encode(text, add_special_tokens=False), text


def test_bos_is_added_and_control_tokens_match_whole(vocabulary: Vocabulary) -> None:
    ours, sp = vocabulary.ours, vocabulary.sp
    inst, think = sp.piece_to_id("[INST]"), sp.piece_to_id("<think>")
    ids = ours.encode("[INST] kato <think>")
    assert ids[0] == sp.bos_id()  # a SentencePiece file that says nothing: BOS, as llama.cpp
    assert inst in ids and think in ids
    # control tokens skipped, user-defined kept, the text's own spaces kept (where the
    # file adds a space prefix, the text after a control token gets one too, as llama.cpp
    # gives it, and decoding takes it off again)
    assert ours.decode(ids) == " kato <think>"


def test_streaming_decode_never_splits_a_byte_spelled_character(vocabulary: Vocabulary) -> None:
    """Characters outside the vocabulary are several <0xNN> tokens: streamed one token at a
    time, a piece is only ever whole characters, and the pieces add up to the text."""
    ours = vocabulary.ours
    text = "kato 😀 日本語 naïve toka"
    ids = ours.backend.encode(text, add_special_tokens=False).ids
    assert len(ids) > len(text.split())  # byte tokens among them
    stream = IncrementalDetokenizer(ours)
    pieces = [stream.push(i) for i in ids] + [stream.finish()]
    assert "".join(pieces) == ours.decode(ids) == text
    assert all("\ufffd" not in piece for piece in pieces)
