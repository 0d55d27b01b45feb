"""Float decoders quantized in memory, as `--quantization int4` holds a Hugging Face
folder's weights (loaders/assembly.py quantizes them the same way, one linear at a time
as it reads them): for the kernel and family tests that build their model first."""

from __future__ import annotations

from torch import nn

from vigil.engine.model.codes import quantize_int4, quantize_int8
from vigil.engine.model.families import CausalLM
from vigil.engine.model.packed import Kernel, choose_kernel
from vigil.engine.model.quantized import attach_fused_decode, packed_linear, quantize_head


def quantize_model(model: CausalLM, fused: bool = True, kernel: Kernel | None = None) -> None:
    """A float model's decoder-layer linears -> Int4Linear and its output head ->
    Int8Linear, in place. `kernel`: by default the one measured fastest on this CPU, as
    an explicit int4 takes it (packed.choose_kernel)."""
    kernel = choose_kernel(int8_activations=True) if kernel is None else kernel
    for parent in model.model.layers.modules():
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):  # qkv_proj, o_proj, gate_up_proj, down_proj
                codes = quantize_int4(child.weight.detach())
                setattr(parent, name, packed_linear(codes, child.bias, kernel))
    dtype = model.model.embed_tokens.weight.dtype
    quantize_head(model, quantize_int8(model.lm_head.weight.detach()), dtype, kernel)
    if fused:
        attach_fused_decode(model)
