"""Load a Llama-family GGUF file: dequantize the weights, build the tokenizer.

llama.cpp's converter permutes the rows of attn_q and attn_k within each head
for interleaved (GPT-J style) RoPE. We undo it here so that the model can use
the rotate-half RoPE of the Hugging Face layout; getting this wrong still runs
but produces garbage.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import gguf
import numpy as np
from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from vigil.engine.loaders.progress import progress
from vigil.engine.model.config import DecoderConfig
from vigil.engine.tokenizer import Tokenizer

_CONTROL = 3  # gguf TokenType.CONTROL
_USER_DEFINED = 4

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

if TYPE_CHECKING:
    import torch


class GGUFFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.reader = gguf.GGUFReader(str(path))
        arch = self.field("general.architecture")
        if arch != "llama":
            raise ValueError(f"{path.name}: architecture {arch!r} is not supported (only llama)")
        self.arch = arch

    def field(self, key: str, default: Any = None) -> Any:
        f = self.reader.fields.get(key)
        return default if f is None else f.contents()

    def config(self) -> DecoderConfig:
        a = self.arch
        num_heads = int(self.field(f"{a}.attention.head_count"))
        hidden = int(self.field(f"{a}.embedding_length"))
        names = {t.name for t in self.reader.tensors}
        vocab = self.field(f"{a}.vocab_size") or len(self.field("tokenizer.ggml.tokens"))
        return DecoderConfig(
            vocab_size=int(vocab),
            hidden_size=hidden,
            intermediate_size=int(self.field(f"{a}.feed_forward_length")),
            num_layers=int(self.field(f"{a}.block_count")),
            num_heads=num_heads,
            num_kv_heads=int(self.field(f"{a}.attention.head_count_kv", num_heads)),
            head_dim=int(self.field(f"{a}.rope.dimension_count", hidden // num_heads)),
            rope_theta=float(self.field(f"{a}.rope.freq_base", 10000.0)),
            rms_norm_eps=float(self.field(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)),
            max_position=int(self.field(f"{a}.context_length")),
            tie_word_embeddings="output.weight" not in names,
        )

    def state_dict(self, cfg: DecoderConfig, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Dequantized weights under Hugging Face names, in `nn.Linear` (out, in) layout."""
        import torch  # here only: the gateway reads these files' tokenizers, not weights

        out: dict[str, torch.Tensor] = {}
        for t in progress(self.reader.tensors, f"loading {self.path.name}", unit="tensor"):
            name = _hf_name(t.name)
            arr = gguf.quants.dequantize(t.data, t.tensor_type)
            # F32 tensors come back as read-only memmap views: copy before torch owns them.
            w = torch.from_numpy(np.array(arr, dtype=np.float32, copy=True))
            if name.endswith("q_proj.weight"):
                w = _unpermute(w, cfg.num_heads)
            elif name.endswith("k_proj.weight"):
                w = _unpermute(w, cfg.num_kv_heads)
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


def _hf_name(gguf_name: str) -> str:
    base, _, suffix = gguf_name.rpartition(".")
    if base == "token_embd":
        return "model.embed_tokens.weight"
    if base == "output_norm":
        return "model.norm.weight"
    if base == "output":
        return "lm_head.weight"
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{suffix}"
    raise ValueError(f"unexpected GGUF tensor {gguf_name!r}")


def _unpermute(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's per-head row permutation: (out, in) rows viewed as
    (heads, head_dim/2, 2, in) -> swap the middle axes -> flatten."""
    out_dim, in_dim = w.shape
    return (
        w.reshape(num_heads, out_dim // num_heads // 2, 2, in_dim)
        .transpose(1, 2)
        .reshape(out_dim, in_dim)
    )
