"""An embedding model's tokenizer and window, read from its sentence-transformers folder
without torch: the gateway tokenizes embedding inputs with them, and the loader
(embedder.py) builds the model's with the same functions, so both count alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from vigil.engine.loaders import hf
from vigil.engine.loaders.sentence_transformers import read_max_seq_len
from vigil.engine.model.config import BERT_FAMILY, BertConfig, decoder_fields
from vigil.engine.tokenizer import Tokenizer


def read_embedding_tokenizer(folder: Path) -> Tokenizer:
    """The model's tokenizer alone (no weights), as the gateway runs it: its own special
    tokens added ([CLS] and [SEP], a decoder's end of text), nothing cut or padded, and
    the model's window as `max_input_tokens`."""
    return Tokenizer(
        read_backend(folder),
        eos_token_ids=frozenset(),
        chat_template=None,
        add_special_tokens=True,
        max_input_tokens=read_window(folder, hf.read_config(folder)),
    )


def read_window(folder: Path, config: dict[str, Any]) -> int:
    """The most tokens a text may be: what sentence-transformers' files say (usually
    below the position table's, 256 of 512 for MiniLM: the model was trained at that
    length), within the positions the model has (RoBERTa's from padding_idx + 1)."""
    if config.get("model_type") in BERT_FAMILY:
        positions = BertConfig.from_hf(config).max_tokens
    else:
        positions = int(decoder_fields(config)["max_position"])
    declared = read_max_seq_len(folder)
    return min(declared, positions) if declared is not None else positions


def read_backend(folder: Path) -> HFTokenizer:
    """The Hugging Face tokenizer of tokenizer.json, with truncation and padding off."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no tokenizer.json")
    tokenizer = HFTokenizer.from_file(str(path))
    # tokenizer.json may carry truncation and fixed-length padding (MiniLM's cuts
    # and pads to 128): off, so counts are true and over-long texts are rejected
    # rather than silently cut. Padding is done by hand in embed_token_ids,
    # which keeps this shared tokenizer free of per-call state.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer
