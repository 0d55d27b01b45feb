"""An embedding model's tokenizer and window, read from its sentence-transformers folder
without torch: the gateway tokenizes embedding inputs with them, and the loader
(embedder.py) builds the model's with the same functions, so both count alike."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from vigil.engine.loaders import hf
from vigil.engine.model.config import BertConfig
from vigil.engine.tokenizer import Tokenizer


def read_embedding_tokenizer(folder: Path) -> Tokenizer:
    """The model's tokenizer alone (no weights), as the gateway runs it: [CLS] and [SEP]
    added, nothing cut or padded, and the model's window as `max_input_tokens`."""
    cfg = BertConfig.from_hf(hf.read_config(folder))
    return Tokenizer(
        read_backend(folder),
        eos_token_ids=frozenset(),
        chat_template=None,
        add_special_tokens=True,
        max_input_tokens=read_max_seq_len(folder, cfg),
    )


def read_max_seq_len(folder: Path, cfg: BertConfig) -> int:
    # sentence-transformers' limit is usually below the position table's
    # (256 of 512 for MiniLM): the model was trained at that length.
    path = folder / "sentence_bert_config.json"
    st_max = json.loads(path.read_text()).get("max_seq_length") if path.is_file() else None
    return min(int(st_max), cfg.max_position) if st_max else cfg.max_position


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
