"""Build a ready-to-run sentence-embedding model from a sentence-transformers folder.

The folder is a Hugging Face BERT checkpoint plus sentence-transformers' own
files: `modules.json` (the pipeline: Transformer -> Pooling [-> Normalize]),
the pooling config it points to, and `sentence_bert_config.json` (max length).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer as HFTokenizer

from vigil.engine.bundled import ModelSource
from vigil.engine.limits import RequestRejected, check_embedding_inputs
from vigil.engine.loaders import hf
from vigil.engine.loaders.embedder_tokenizer import read_backend, read_max_seq_len
from vigil.engine.model.bert import BertModel
from vigil.engine.model.config import BertConfig


class Pooling(StrEnum):
    MEAN = "mean"  # average of the real tokens' last hidden states
    CLS = "cls"  # the [CLS] token's last hidden state


# sentence-transformers' pooling flags; any other flag set to true is unsupported.
_POOLING_FLAGS = {"pooling_mode_mean_tokens": Pooling.MEAN, "pooling_mode_cls_token": Pooling.CLS}
_ST_MODULES = "sentence_transformers.models."


@dataclass(slots=True)
class EmbeddingModel:
    name: str
    config: BertConfig
    model: BertModel
    tokenizer: HFTokenizer  # truncation and padding off: lengths are checked, never cut
    pooling: Pooling
    normalize: bool
    pad_token_id: int
    dim: int
    max_seq_len: int  # in tokens, [CLS] and [SEP] included
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
            pooled = _pool(hidden, mask, self.pooling)  # (N, C)
            if self.normalize:
                pooled = F.normalize(pooled, p=2.0, dim=-1)
        return pooled.cpu()


def _pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    # hidden: (N, T, C) float32, mask: (N, T) 1 = real token
    if pooling is Pooling.CLS:
        return hidden[:, 0]  # (N, C)
    weights = mask.to(hidden.dtype).unsqueeze(-1)  # (N, T, 1)
    # Sum over real tokens only; padded positions hold garbage that must not leak in.
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)  # (N, C)


def load_embedding_model(
    source: ModelSource, device: torch.device, dtype: torch.dtype
) -> EmbeddingModel:
    folder = source.path
    raw = hf.read_config(folder)
    if raw.get("model_type") != "bert":
        raise ValueError(
            f"{folder}: model_type {raw.get('model_type')!r} is not supported for "
            "embeddings (only bert)"
        )
    for key, expected in (("hidden_act", "gelu"), ("position_embedding_type", "absolute")):
        if raw.get(key, expected) != expected:
            raise ValueError(f"{folder}: {key} {raw[key]!r} is not supported (only {expected})")
    cfg = BertConfig.from_hf(raw)
    pooling, normalize = _read_pipeline(folder, cfg)
    model = build_bert(cfg, hf.read_safetensors(folder, dtype), device)
    return EmbeddingModel(
        name=source.name,
        config=cfg,
        model=model,
        tokenizer=read_backend(folder),
        pooling=pooling,
        normalize=normalize,
        pad_token_id=int(raw.get("pad_token_id") or 0),
        dim=cfg.hidden_size,
        max_seq_len=read_max_seq_len(folder, cfg),
        device=device,
        dtype=dtype,
    )


def build_bert(
    cfg: BertConfig, weights: dict[str, torch.Tensor], device: torch.device
) -> BertModel:
    # Checkpoints saved from a task model (BertForX) prefix every name with "bert.".
    weights = {k.removeprefix("bert."): v for k, v in weights.items()}
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


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing (not a sentence-transformers model folder?)")
    return json.loads(path.read_text())


def _read_pipeline(folder: Path, cfg: BertConfig) -> tuple[Pooling, bool]:
    """Pooling mode and whether to L2-normalise, from modules.json and the pooling config."""
    modules: list[dict[str, Any]] = _read_json(folder / "modules.json")
    kinds = [str(m.get("type", "")).removeprefix(_ST_MODULES) for m in modules]
    unsupported = [k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
    if unsupported:
        raise ValueError(f"{folder}: sentence-transformers modules {unsupported} not supported")
    if kinds.count("Pooling") != 1:
        raise ValueError(f"{folder}: modules.json must list exactly one Pooling module")
    pooling_dir = modules[kinds.index("Pooling")].get("path", "1_Pooling")
    pool_cfg: dict[str, Any] = _read_json(folder / pooling_dir / "config.json")
    enabled = sorted(k for k, v in pool_cfg.items() if k.startswith("pooling_mode") and v is True)
    if len(enabled) != 1 or enabled[0] not in _POOLING_FLAGS:
        raise ValueError(
            f"{folder}: pooling {enabled} is not supported (exactly one of "
            f"{sorted(_POOLING_FLAGS)} must be true)"
        )
    dim = pool_cfg.get("word_embedding_dimension", cfg.hidden_size)
    if dim != cfg.hidden_size:
        raise ValueError(f"{folder}: pooling dimension {dim} != hidden_size {cfg.hidden_size}")
    return _POOLING_FLAGS[enabled[0]], "Normalize" in kinds
