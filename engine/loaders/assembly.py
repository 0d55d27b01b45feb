"""Build a decoder from its weights as they are read, one tensor at a time.

The model is made on the meta device (no memory, no random initialisation) and each
weight takes its place as it arrives: a float tensor as a parameter in the model's
dtype, or, quantized, a decoder-layer linear packed as soon as its parts are in.
Hugging Face's q/k/v and gate/up parts become our fused qkv_proj and gate_up_proj
(llama.py) here; Phi-3's checkpoints and its GGUF files hold them fused already. So a
load holds at its peak the model built so far and one layer's parts, never the whole
float model beside the packed one (README "Precision" has the measured peaks).

Quantized (Precision.quantization int4 or int8):

    decoder-layer linears  Int4Linear / Int8Linear of the file's own codes where it has
                           them and they are that kind (or finer, Precision.keep_finer),
                           else of the weights quantized here
    output head            Int8Linear (Q8_0's rule); tied to the token embeddings, it
                           serves their lookups too, and no float table is made
    everything else        float, in dtype
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import chain

import torch
from torch import nn

from vigil.engine.model.codes import (
    Codes,
    Int4Codes,
    Int8Codes,
    Weight,
    cat_codes,
    dequantized,
    quantize_int4,
    quantize_int8,
)
from vigil.engine.model.config import DecoderConfig
from vigil.engine.model.families import CausalLM, family
from vigil.engine.model.packed import Kernel, choose_kernel
from vigil.engine.model.quantized import attach_fused_decode, packed_linear, quantize_head
from vigil.engine.precision import Precision

# our fused linear <- Hugging Face's parts, stacked along `out` in this order
FUSED = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}
_PART_OF = {part: (fused, i) for fused, parts in FUSED.items() for i, part in enumerate(parts)}
_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)")
_TABLES = ("model.embed_tokens", "lm_head")


def assemble_decoder(
    cfg: DecoderConfig,
    weights: Iterable[tuple[str, Weight]],
    precision: Precision,
    dtype: torch.dtype,
    device: torch.device,
    head: bool = True,
) -> CausalLM:
    """A ready decoder from Hugging Face-named weights, each used as it comes.
    `head`: False for an embedder's, which needs the hidden states only (a checkpoint's
    output head, if it has one, is passed over)."""
    assembly = _Assembly(cfg, precision, dtype, device, head)
    for name, weight in weights:
        assembly.add(name, weight)
    return assembly.finish()


class _Assembly:
    def __init__(
        self,
        cfg: DecoderConfig,
        precision: Precision,
        dtype: torch.dtype,
        device: torch.device,
        head: bool,
    ) -> None:
        with torch.device("meta"):
            self.model = family(cfg.architecture).model(cfg)
        if not head:
            self.model.lm_head = nn.Identity()  # type: ignore[assignment]
        self.cfg, self.precision, self.dtype, self.device = cfg, precision, dtype, device
        self.head = head
        self.kernel: Kernel | None = None
        if precision.quantization != "none":
            self.kernel = choose_kernel(precision.int8_activations)
        self.parts: dict[str, list[Weight | None]] = {}  # fused tensor -> its parts so far
        self.linears: dict[str, dict[str, Weight]] = {}  # layer linear -> weight, bias so far
        self.head_packed = False  # quantized: whether the int8 head is built

    def add(self, name: str, weight: Weight) -> None:
        if name.endswith("rotary_emb.inv_freq"):  # old checkpoints' RoPE tables: ours are made
            return
        if not self.head and name.startswith("lm_head."):
            return
        match = _LAYER.fullmatch(name)
        if match is None or match[2] not in _PART_OF:
            self._place(name, weight)
            return
        fused, index = _PART_OF[match[2]]
        target = f"model.layers.{match[1]}.{fused}.{match[3]}"
        parts = self.parts.setdefault(target, [None] * len(FUSED[fused]))
        parts[index] = weight
        if all(p is not None for p in parts):
            del self.parts[target]
            self._place(target, self._stack([p for p in parts if p is not None]))

    def _stack(self, parts: list[Weight]) -> Weight:
        if all(isinstance(p, torch.Tensor) for p in parts):
            return torch.cat([dequantized(p) for p in parts])
        return cat_codes([self._codes(p) for p in parts])

    def _place(self, name: str, weight: Weight) -> None:
        module_name, _, attr = name.rpartition(".")
        try:
            module = self.model.get_submodule(module_name)
        except AttributeError:
            module = None
        current = getattr(module, attr, None)
        if not isinstance(current, torch.Tensor):
            raise ValueError(f"weights do not match the model: unexpected {name}")
        if tuple(weight.shape) != tuple(current.shape):
            raise ValueError(
                f"weights do not match the model: {name} is {tuple(weight.shape)}, "
                f"the model's {tuple(current.shape)}"
            )
        quantized = self.kernel is not None
        if quantized and module_name.startswith("model.layers.") and isinstance(module, nn.Linear):
            self._pack_when_whole(module_name, attr, weight)
        elif quantized and self.head and module_name in _TABLES and self._is_head(module_name):
            self._pack_head(weight)
        else:
            tensor = dequantized(weight).to(device=self.device, dtype=self.dtype)
            setattr(module, attr, nn.Parameter(tensor, requires_grad=False))

    def _is_head(self, module_name: str) -> bool:
        """Whether this table is the one the int8 head is made of: the head's own, or,
        tied, the embeddings' (which a tied checkpoint may hold alone)."""
        return module_name == "lm_head" or self.cfg.tie_word_embeddings

    def _pack_head(self, weight: Weight) -> None:
        """As soon as it is read: packing the largest matrix costs a float copy of it
        for a moment (the bundled model's: 113 MB), least while little else is held."""
        if self.head_packed:  # tied, and held twice by the checkpoint: the same table
            return
        assert self.kernel is not None
        codes = weight if isinstance(weight, Int8Codes) else quantize_int8(weight)
        quantize_head(self.model, codes, self.dtype, self.kernel)
        self.head_packed = True

    def _pack_when_whole(self, module_name: str, attr: str, weight: Weight) -> None:
        held = self.linears.setdefault(module_name, {})
        held[attr] = weight
        linear = self.model.get_submodule(module_name)
        assert isinstance(linear, nn.Linear)
        if "weight" not in held or ("bias" not in held and linear.bias is not None):
            return
        del self.linears[module_name]
        assert self.kernel is not None
        bias = held.get("bias")
        bias = None if bias is None else dequantized(bias).to(self.dtype)
        parent, _, child = module_name.rpartition(".")
        packed = packed_linear(self._codes(held["weight"]), bias, self.kernel)
        setattr(self.model.get_submodule(parent), child, packed)

    def _codes(self, weight: Weight) -> Codes:
        """The weight as the kind of codes its linear runs: the file's own where they are
        that kind (or finer, where the precision keeps them), else quantized here."""
        if self.precision.quantization == "int8":
            return weight if isinstance(weight, Int8Codes) else quantize_int8(weight)
        if isinstance(weight, Int4Codes):
            return weight
        if isinstance(weight, Int8Codes) and self.precision.keep_finer:
            return weight
        return quantize_int4(weight)

    def finish(self) -> CausalLM:
        model = self.model
        if self.kernel is None and self.head and self.cfg.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
        model.rebuild_buffers()
        tensors = chain(model.named_parameters(), model.named_buffers())
        missing = sorted({*self.parts, *self.linears, *(n for n, t in tensors if t.is_meta)})
        if missing:
            raise ValueError(f"weights do not match the model: missing {missing[:5]}")
        model = model.to(self.device).eval()
        if self.kernel is not None:
            attach_fused_decode(model)
        return model
