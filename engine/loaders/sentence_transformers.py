"""What a sentence-transformers folder says to do with its model's hidden states.

`modules.json` lists the pipeline: Transformer -> Pooling [-> Normalize]. The pooling
module's `config.json` names the pooling, in either of the library's spellings: one
`pooling_mode_*` flag set true (up to 5.x) or `pooling_mode` (6.x). The longest text
the model was trained at is `max_seq_length` in `sentence_bert_config.json` (up to 5.x)
or `model_max_length` in `tokenizer_config.json` (6.x); without either, the model's
position table decides (embedder_tokenizer.read_window). Any other module (Dense, a
router, a projection) or pooling (max, weighted mean) is refused at load rather than
served wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vigil.engine.model.config import Pooling

_MODULES = ("Transformer", "Pooling", "Normalize")
# sentence-transformers' pooling flags (<= 5.x) and mode names (6.x) -> ours
_FLAGS = {
    "pooling_mode_mean_tokens": Pooling.MEAN,
    "pooling_mode_cls_token": Pooling.CLS,
    "pooling_mode_lasttoken": Pooling.LAST,
}
_MODES = {"mean": Pooling.MEAN, "cls": Pooling.CLS, "lasttoken": Pooling.LAST}
_UNSET = 10**9  # transformers writes ~1e30 for "no limit"


@dataclass(frozen=True, slots=True)
class SentencePipeline:
    pooling: Pooling
    normalize: bool


def read_pipeline(folder: Path, hidden_size: int) -> SentencePipeline:
    modules: list[dict[str, Any]] = _read_json(folder / "modules.json")
    kinds = [str(m.get("type", "")).rpartition(".")[2] for m in modules]
    unsupported = [m["type"] for m, k in zip(modules, kinds, strict=True) if k not in _MODULES]
    if unsupported:
        raise ValueError(f"{folder}: sentence-transformers modules {unsupported} not supported")
    if kinds.count("Pooling") != 1:
        raise ValueError(f"{folder}: modules.json must list exactly one Pooling module")
    path = modules[kinds.index("Pooling")].get("path", "1_Pooling")
    config: dict[str, Any] = _read_json(folder / path / "config.json")
    dim = config.get("embedding_dimension", config.get("word_embedding_dimension", hidden_size))
    if dim != hidden_size:
        raise ValueError(f"{folder}: pooling dimension {dim} != hidden_size {hidden_size}")
    return SentencePipeline(_pooling(folder, config), "Normalize" in kinds)


def _pooling(folder: Path, config: dict[str, Any]) -> Pooling:
    if "pooling_mode" in config:
        modes = config["pooling_mode"]
        modes = [modes] if isinstance(modes, str) else list(modes)
        if len(modes) == 1 and modes[0] in _MODES:
            return _MODES[modes[0]]
        raise ValueError(f"{folder}: pooling {modes} is not supported (one of {', '.join(_MODES)})")
    enabled = sorted(k for k, v in config.items() if k.startswith("pooling_mode") and v is True)
    if len(enabled) != 1 or enabled[0] not in _FLAGS:
        raise ValueError(
            f"{folder}: pooling {enabled} is not supported (exactly one of "
            f"{sorted(_FLAGS)} must be true)"
        )
    return _FLAGS[enabled[0]]


def read_max_seq_len(folder: Path) -> int | None:
    """The longest text the folder declares, in tokens; None: it declares none."""
    for name, key in (
        ("sentence_bert_config.json", "max_seq_length"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        path = folder / name
        value = json.loads(path.read_text()).get(key) if path.is_file() else None
        if isinstance(value, int | float) and 0 < value < _UNSET:
            return int(value)
    return None


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing (not a sentence-transformers model folder?)")
    return json.loads(path.read_text())
