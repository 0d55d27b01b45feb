"""Load a decoder's GGUF file: dequantize the weights, build the tokenizer.

The weights come back under Hugging Face's names and layout, whatever the
architecture (gguf_architectures.py says what each changed). For `llama` files
llama.cpp's converter permutes the rows of attn_q and attn_k within each head for
interleaved (GPT-J style) RoPE; we undo it so that the model can use the rotate-half
RoPE of the Hugging Face layout; getting this wrong still runs but produces garbage.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import gguf
import numpy as np
from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from vigil.engine.loaders.gguf_architectures import (
    MODEL_TYPES,
    NORMS_PLUS_ONE,
    PERMUTED_QK,
    config_from_gguf,
    hf_name,
)
from vigil.engine.loaders.progress import progress
from vigil.engine.model.config import DecoderConfig
from vigil.engine.tokenizer import Tokenizer

_CONTROL = 3  # gguf TokenType.CONTROL
_USER_DEFINED = 4


if TYPE_CHECKING:
    import torch


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

    def state_dict(self, cfg: DecoderConfig, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Dequantized weights under Hugging Face names, in `nn.Linear` (out, in) layout."""
        import torch  # here only: the gateway reads these files' tokenizers, not weights

        out: dict[str, torch.Tensor] = {}
        tensors = [t for t in self.reader.tensors if t.name != "rope_freqs.weight"]  # config's
        for t in progress(tensors, f"loading {self.path.name}", unit="tensor"):
            name = hf_name(self.arch, t.name)
            arr = gguf.quants.dequantize(t.data, t.tensor_type)
            # F32 tensors come back as read-only memmap views: copy before torch owns them.
            w = torch.from_numpy(np.array(arr, dtype=np.float32, copy=True))
            if self.arch in PERMUTED_QK and name.endswith("q_proj.weight"):
                w = _unpermute(w, cfg.num_heads)
            elif self.arch in PERMUTED_QK and name.endswith("k_proj.weight"):
                w = _unpermute(w, cfg.num_kv_heads)
            elif self.arch in NORMS_PLUS_ONE and name.endswith("norm.weight"):
                w = w - 1.0  # our Gemma norms multiply by (1 + weight), as Hugging Face's
            out[name] = w.to(dtype)
        return out

    def tokenizer(self) -> Tokenizer:
        model = self.field("tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(f"{self.path.name}: tokenizer {model!r} is not supported (only gpt2)")
        tokens: list[str] = list(self.field("tokenizer.ggml.tokens"))
        types: list[int] = list(self.field("tokenizer.ggml.token_type"))
        merges = [tuple(m.split(" ", 1)) for m in self.field("tokenizer.ggml.merges")]
        vocab = {tok: i for i, tok in enumerate(tokens)}
        backend = HFTokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
        pre: list[pre_tokenizers.PreTokenizer] = []
        if self.field("tokenizer.ggml.pre") in ("smollm", "starcoder", "refact"):
            pre.append(pre_tokenizers.Digits(individual_digits=True))
        pre.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
        backend.pre_tokenizer = pre_tokenizers.Sequence(pre)
        backend.decoder = decoders.ByteLevel()
        special = [
            AddedToken(tok, special=True, normalized=False)
            for tok, ty in zip(tokens, types, strict=True)
            if ty in (_CONTROL, _USER_DEFINED)
        ]
        backend.add_special_tokens(special)
        eos = self.field("tokenizer.ggml.eos_token_id")
        bos = self.field("tokenizer.ggml.bos_token_id")
        eos_ids = {int(eos)} if eos is not None else set()
        eot = self.field("tokenizer.ggml.eot_token_id")
        if eot is not None:
            eos_ids.add(int(eot))
        return Tokenizer(
            backend,
            eos_token_ids=frozenset(eos_ids),
            chat_template=self.field("tokenizer.chat_template"),
            bos_token=tokens[int(bos)] if bos is not None else None,
            eos_token=tokens[int(eos)] if eos is not None else None,
        )


def _unpermute(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's per-head row permutation: (out, in) rows viewed as
    (heads, head_dim/2, 2, in) -> swap the middle axes -> flatten."""
    out_dim, in_dim = w.shape
    return (
        w.reshape(num_heads, out_dim // num_heads // 2, 2, in_dim)
        .transpose(1, 2)
        .reshape(out_dim, in_dim)
    )
