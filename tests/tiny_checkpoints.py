"""Tiny Hugging Face model folders that tests make with transformers and tokenizers,
offline: the references the engine's decoders are held to."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers


def save_word_tokenizer(folder: Path, vocab_size: int) -> None:
    """tokenizer.json of whole words: "<unk>", "<s>", "</s>", then "w3" .. "w{vocab_size-1}",
    so that a test writes token ids as text and back exactly."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, vocab_size)}
    tokenizer = HFTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(folder / "tokenizer.json"))
