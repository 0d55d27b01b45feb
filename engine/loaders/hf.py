"""Load a Hugging Face model folder: config.json, *.safetensors, tokenizer.json."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors import safe_open
from tokenizers import Tokenizer as HFTokenizer

from vigil.engine.loaders.progress import progress
from vigil.engine.tokenizer import Tokenizer

if TYPE_CHECKING:
    import torch


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no config.json (not a Hugging Face model folder)")
    cfg: dict[str, Any] = json.loads(path.read_text())
    return cfg


def read_safetensors(folder: Path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {name: w.to(dtype) for name, w in iter_safetensors(folder)}


def iter_safetensors(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor of the folder's *.safetensors, one at a time, in its stored dtype."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors weights")
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in progress(list(f.keys()), f"loading {file.name}", unit="tensor"):
                yield name, f.get_tensor(name)


def read_tokenizer(folder: Path, cfg: dict[str, Any], *, add_special_tokens: bool) -> Tokenizer:
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no tokenizer.json")
    backend = HFTokenizer.from_file(str(path))
    tok_cfg: dict[str, Any] = {}
    if (folder / "tokenizer_config.json").is_file():
        tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
    template = tok_cfg.get("chat_template")
    if template is None and (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text()
    eos = cfg.get("eos_token_id")
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    eos_token = _token_text(tok_cfg.get("eos_token"))
    if eos_token is not None and (tid := backend.token_to_id(eos_token)) is not None:
        eos_ids.add(tid)
    return Tokenizer(
        backend,
        eos_token_ids=frozenset(int(i) for i in eos_ids),
        chat_template=template if isinstance(template, str) else None,
        bos_token=_token_text(tok_cfg.get("bos_token")),
        eos_token=eos_token,
        add_special_tokens=add_special_tokens,
    )


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        content = value.get("content")
        return content if isinstance(content, str) else None
    return value if isinstance(value, str) else None
