"""Build a ready-to-run sentence-embedding model from a sentence-transformers folder.

The folder is a Hugging Face checkpoint plus sentence-transformers' own files, read as
they say (loaders/sentence_transformers.py: pooling, normalization, length). The
checkpoint is a BERT-family encoder (BERT, RoBERTa, XLM-R: model/bert.py) or a decoder
of a family Vigil runs (model/families.py: Qwen2, Llama, ...), whose last hidden
states are taken as an encoder's (model/decoder_encoder.py), mostly with last-token
pooling.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer as HFTokenizer
from torch import nn

from vigil.engine.bundled import ModelSource
from vigil.engine.limits import RequestRejected, check_embedding_inputs
from vigil.engine.loaders import hf
from vigil.engine.loaders.assembly import assemble_decoder
from vigil.engine.loaders.embedder_tokenizer import read_backend, read_window
from vigil.engine.loaders.sentence_transformers import read_pipeline
from vigil.engine.model.bert import BertModel
from vigil.engine.model.config import (
    BERT_FAMILY,
    DECODER_TYPES,
    BertConfig,
    DecoderConfig,
    Pooling,
)
from vigil.engine.model.decoder_encoder import DecoderEncoder
from vigil.engine.model.families import family
from vigil.engine.model.pooling import pool
from vigil.engine.precision import Precision


@dataclass(slots=True)
class EmbeddingModel:
    name: str
    config: BertConfig | DecoderConfig
    model: nn.Module  # (input_ids (N, T), attention_mask (N, T)) -> last hidden (N, T, C)
    tokenizer: HFTokenizer  # truncation and padding off: lengths are checked, never cut
    pooling: Pooling
    normalize: bool
    pad_token_id: int
    dim: int
    max_seq_len: int  # in tokens, the tokenizer's own ([CLS], [SEP], EOS) included
    device: torch.device
    dtype: torch.dtype

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, or ValueError for input the model cannot embed."""
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise ValueError("input must be a list of strings")
        if not texts:
            raise ValueError("input must hold at least one text")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"input[{i}] is {type(text).__name__}, not a string")
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        ids = [list(e.ids) for e in encodings]
        for i, row in enumerate(ids):
            if not row:  # a tokenizer that adds nothing, on empty text: nothing to pool
                raise ValueError(f"input[{i}] is empty; {self.name} embeds at least one token")
            if len(row) > self.max_seq_len:
                raise ValueError(
                    f"input[{i}] is {len(row)} tokens; {self.name} accepts at most "
                    f"{self.max_seq_len} tokens per text"
                )
        return ids

    def embed(self, texts: list[str]) -> torch.Tensor:
        return self.embed_token_ids(self.tokenize(texts))  # (N, dim)

    def check_token_ids(self, batch: Sequence[Sequence[int]]) -> None:
        """RequestRejected (a ValueError) for rows of ids this model cannot embed. The
        gateway tokenizes with this model's own tokenizer and window, so only ids made
        from other files (a model folder changed under one of them) fail here."""
        if not batch:
            raise RequestRejected("input must hold at least one text", "input")
        check_embedding_inputs([len(row) for row in batch], self.max_seq_len)
        vocab = self.config.vocab_size
        for i, row in enumerate(batch):
            if not row or not all(0 <= t < vocab for t in row):
                raise RequestRejected(
                    f"input[{i}] is not token ids of this model (0 to {vocab - 1}, one at least)",
                    f"input[{i}]",
                )

    def embed_token_ids(self, batch: Sequence[Sequence[int]]) -> torch.Tensor:
        """One padded forward pass over already-checked token ids -> (N, dim) float32 on CPU."""
        n, t = len(batch), max(len(row) for row in batch)
        input_ids = torch.full((n, t), self.pad_token_id, dtype=torch.long)  # (N, T)
        mask = torch.zeros((n, t), dtype=torch.long)  # (N, T)
        for i, row in enumerate(batch):
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        with torch.inference_mode():
            hidden = self.model(input_ids, mask).float()  # (N, T, C)
            pooled = pool(hidden, mask, self.pooling)  # (N, C)
            if self.normalize:
                pooled = F.normalize(pooled, p=2.0, dim=-1)
        return pooled.cpu()


def load_embedding_model(
    source: ModelSource, device: torch.device, dtype: torch.dtype
) -> EmbeddingModel:
    folder = source.path
    raw = hf.read_config(folder)
    model_type = raw.get("model_type")
    if model_type not in BERT_FAMILY and model_type not in DECODER_TYPES:
        raise ValueError(
            f"{folder}: model_type {model_type!r} is not supported for embeddings "
            f"({', '.join((*BERT_FAMILY, *DECODER_TYPES))})"
        )
    pipeline = read_pipeline(folder, int(raw["hidden_size"]))  # before the weights: cheap
    encoder: nn.Module
    config: BertConfig | DecoderConfig
    if model_type in BERT_FAMILY:
        for key, expected in (("hidden_act", "gelu"), ("position_embedding_type", "absolute")):
            if raw.get(key, expected) != expected:
                raise ValueError(f"{folder}: {key} {raw[key]!r} is not supported (only {expected})")
        config = BertConfig.from_hf(raw)
        weights = hf.read_safetensors(folder, dtype)
        encoder = build_bert(config, weights, device, prefix=f"{model_type.replace('-', '_')}.")
    else:
        config = family(model_type).config_from_hf(raw)
        precision = Precision("none", str(dtype).removeprefix("torch."), "an embedder's")
        decoder_weights = _as_causal_lm(hf.iter_safetensors(folder))
        try:
            decoder = assemble_decoder(
                config, decoder_weights, precision, dtype, device, head=False
            )
        except ValueError as e:
            raise ValueError(f"{folder}: {e}") from e
        encoder = DecoderEncoder(decoder).to(device)
    return EmbeddingModel(
        name=source.name,
        config=config,
        model=encoder,
        tokenizer=read_backend(folder),
        pooling=pipeline.pooling,
        normalize=pipeline.normalize,
        pad_token_id=int(raw.get("pad_token_id") or 0),
        dim=config.hidden_size,
        max_seq_len=read_window(folder, raw),
        device=device,
        dtype=dtype,
    )


def _as_causal_lm(
    weights: Iterator[tuple[str, torch.Tensor]],
) -> Iterator[tuple[str, torch.Tensor]]:
    """A decoder embedder's weights under ForCausalLM's names: saved from the bare model
    (Qwen2Model, as sentence-transformers does) they lack the `model.` prefix."""
    for name, w in weights:
        yield (name if name.startswith(("model.", "lm_head.")) else f"model.{name}"), w


def build_bert(
    cfg: BertConfig, weights: dict[str, torch.Tensor], device: torch.device, prefix: str = "bert."
) -> BertModel:
    # Checkpoints saved from a task model (BertForX, RobertaForX) prefix every name with
    # the model's own ("bert.", "roberta.").
    weights = {k.removeprefix(prefix): v for k, v in weights.items()}
    # Not part of our model: the pooler (we pool ourselves) and a position-id
    # buffer old transformers versions saved.
    weights = {
        k: v
        for k, v in weights.items()
        if not k.startswith("pooler.") and k != "embeddings.position_ids"
    }
    # Build on the meta device and adopt the loaded tensors: no time or memory
    # spent on a random initialisation that would be overwritten.
    with torch.device("meta"):
        model = BertModel(cfg)
    result = model.load_state_dict(weights, strict=False, assign=True)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(
            f"weights do not match the model: missing {sorted(result.missing_keys)[:5]}, "
            f"unexpected {sorted(result.unexpected_keys)[:5]}"
        )
    return model.to(device).eval()
