"""Load a decoder's GGUF file: its config, its weights as read (gguf_blocks.py), its
tokenizer (gguf_tokenizer.py).

The weights come back under Hugging Face's names and layout, whatever the
architecture (gguf_architectures.py says what each changed). For `llama` files
llama.cpp's converter permutes the rows of attn_q and attn_k within each head for
interleaved (GPT-J style) RoPE; we undo it so that the model can use the rotate-half
RoPE of the Hugging Face layout; getting this wrong still runs but produces garbage.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gguf
import numpy as np

from vigil.engine.loaders.gguf_architectures import (
    MODEL_TYPES,
    NORMS_PLUS_ONE,
    PERMUTED_QK,
    config_from_gguf,
    hf_name,
)
from vigil.engine.loaders.gguf_tokenizer import gguf_tokenizer
from vigil.engine.loaders.progress import progress
from vigil.engine.model.config import DecoderConfig
from vigil.engine.tokenizer import Tokenizer

if TYPE_CHECKING:
    from vigil.engine.model.codes import Weight


class GGUFFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.reader = gguf.GGUFReader(str(path))
        arch = self.field("general.architecture")
        if arch not in MODEL_TYPES:
            raise ValueError(
                f"{path.name}: architecture {arch!r} is not supported ({', '.join(MODEL_TYPES)})"
            )
        self.arch: str = arch

    def field(self, key: str, default: Any = None) -> Any:
        f = self.reader.fields.get(key)
        return default if f is None else f.contents()

    def config(self) -> DecoderConfig:
        tensors = {t.name: t for t in self.reader.tensors}
        freqs = tensors.get("rope_freqs.weight")
        divisors = None
        if freqs is not None:
            divisors = gguf.quants.dequantize(freqs.data, freqs.tensor_type).tolist()
        try:
            return config_from_gguf(self.arch, self.field, set(tensors), divisors)
        except ValueError as e:
            raise ValueError(f"{self.path.name}: {e}") from e

    def linear_types(self) -> dict[str, int]:
        """The GGUF types of the decoder layers' matrices, with the weights each holds,
        most first: what `--quantization auto` follows."""
        counts: dict[str, int] = {}
        for t in self.reader.tensors:
            if t.name.startswith("blk.") and len(t.shape) == 2:
                name = t.tensor_type.name
                counts[name] = counts.get(name, 0) + int(t.n_elements)
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))

    def weights(self, cfg: DecoderConfig, codes: bool) -> Iterator[tuple[str, Weight]]:
        """Each tensor under its Hugging Face name, in `nn.Linear` (out, in) layout, one
        at a time as read: a matrix whose type has a code path (gguf_blocks.py) as its
        codes where `codes`, anything else dequantized to float32. The iterator holds
        none of this object: drop it, and the reader's parsed metadata (160 MB for the
        bundled model's vocabulary and merges) goes before the weights are read."""
        infos = [
            TensorInfo(t.name, t.tensor_type, t.data_offset, t.n_bytes, t.data.dtype, t.data.shape)
            for t in self.reader.tensors
            if t.name != "rope_freqs.weight"  # the config's
        ]
        return read_weights(self.path, self.arch, infos, cfg, codes)

    def tokenizer(self) -> Tokenizer:
        try:
            return gguf_tokenizer(self.field, self.arch)
        except ValueError as e:
            raise ValueError(f"{self.path.name}: {e}") from e


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """Where a tensor's bytes are, and how the reader shapes them (quantized types:
    (rows, bytes a row) uint8)."""

    name: str
    type: gguf.GGMLQuantizationType
    offset: int
    num_bytes: int
    dtype: np.dtype[Any]
    shape: tuple[int, ...]


def read_weights(
    path: Path, arch: str, infos: list[TensorInfo], cfg: DecoderConfig, codes: bool
) -> Iterator[tuple[str, Weight]]:
    """GGUFFile.weights'. Read with plain reads, not through the reader's map of the
    file: the pages of a map stay resident while it lives, so a model read through it
    held the whole file on top of what it was building."""
    import torch  # here only: the gateway reads these files' tokenizers, not weights

    from vigil.engine.loaders.gguf_blocks import to_codes
    from vigil.engine.model.codes import dequantized

    with path.open("rb") as f:
        for t in progress(infos, f"loading {path.name}", unit="tensor"):
            name = hf_name(arch, t.name)
            f.seek(t.offset)
            raw = np.fromfile(f, dtype=np.uint8, count=t.num_bytes).view(t.dtype).reshape(t.shape)
            weight: Weight | None = to_codes(raw, t.type) if codes else None
            if weight is None:
                weight = torch.from_numpy(_dequantize(t, raw))
            if arch in PERMUTED_QK and name.endswith("q_proj.weight"):
                weight = _unpermute(weight, cfg.num_heads)
            elif arch in PERMUTED_QK and name.endswith("k_proj.weight"):
                weight = _unpermute(weight, cfg.num_kv_heads)
            elif arch in NORMS_PLUS_ONE and name.endswith("norm.weight"):
                weight = dequantized(weight) - 1.0  # our Gemma norms multiply by (1 + w)
            yield name, weight


def _dequantize(t: TensorInfo, raw: np.ndarray) -> np.ndarray:
    try:
        weights = gguf.quants.dequantize(raw, t.type)
    except NotImplementedError as e:
        raise ValueError(
            f"tensor {t.name} is {t.type.name}, a type this gguf package cannot read"
        ) from e
    return np.asarray(weights, dtype=np.float32)


def _unpermute(w: Weight, num_heads: int) -> Weight:
    """Undo llama.cpp's per-head row permutation: (out, in) rows viewed as
    (heads, head_dim/2, 2, in) -> swap the middle axes -> flatten. Codes move whole
    rows, their scales with them."""
    import torch

    out_dim = w.shape[0]
    pairs = torch.arange(out_dim).reshape(num_heads, out_dim // num_heads // 2, 2)
    order = pairs.transpose(1, 2).reshape(-1)  # our row i is the file's row order[i]
    return w[order] if isinstance(w, torch.Tensor) else w.rows(order)
