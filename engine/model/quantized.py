"""Weight-only int4 linears (`--quantization int4`), for decoding on CPU.

At the batch sizes of decoding a step's time is the time to read the weights, so
fewer bytes per weight is the speed-up: 4 bits and a scale and zero per group of 32
(0.56-0.63 bytes a weight, against float32's 4). That is the layout of the GGUF Q4_1
the bundled model ships in (each group's w = q * d + m, q in 0..15), so quantizing its
dequantized weights gives back the same q, d and m: int4 loses nothing of such a
model, only the rounding of the activations (to bfloat16, or to int8 per group of 32
with the VNNI kernel) and of d and m (bfloat16 for ATen's kernels, float16 for VNNI's,
which holds a Q4_1 file's own float16 d and m exactly).

The output head is int8 (symmetric; one scale per group of 32 with the VNNI kernel,
Q8_0's rule, per output row with ATen's and AVX2's, which take no other), not int4: the
bundled model ties it to its token embeddings, which ship as Q8_0, and int4 groups of
them cost 4.6% of perplexity on the parity text where int8 rows cost 0.2%. Tied, the
same int8 weights serve the embedding lookups, so no float copy of the table is kept.

Which kernel multiplies (PyTorch's, or one of engine/kernels' own), for how many rows,
and the bfloat16 copy for the rest: model/packed.py, with what each measured. Inputs
and outputs keep the model's dtype (float32 by default: norms, RoPE, attention and the
KV cache stay float32). CPU only: the CUDA int4 kernel packs weights differently and is
not wired here.

A step that is all decodes runs every decoder layer in one native call
(FusedDecodeLayers, engine/kernels/int4_decode.cpp): the same packed kernels and
weights, with the ops between the matmuls as loops in C++. At one row that cut a step
from 15.8 to 10.7 ms: about 25 ops a layer, each a Python call and a dispatch, had
been a third of it.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from vigil.engine.kernels import int4_decode_ext
from vigil.engine.model.attention import AttentionMetadata
from vigil.engine.model.config import QUANTIZATIONS
from vigil.engine.model.families import CausalLM
from vigil.engine.model.llama import DecoderLayer, LlamaForCausalLM
from vigil.engine.model.packed import (
    GROUP_SIZE,
    Kernel,
    bfloat16_weight,
    choose_kernel,
    extension,
    few_rows,
    fits,
    int4_mm,
    int8_group,
    int8_mm,
    int8_rows,
    many_rows_mm,
    pack_int4,
    pack_int8,
    takes_rows,
)
from vigil.engine.model.rope import RopeTables


class PackedLinear(nn.Module):
    """A linear of packed weights for the rows its kernel takes (few_rows), a
    bfloat16-held copy of the same quantized weights for more; a bias (Qwen2's q/k/v)
    stays in float."""

    packed: torch.Tensor
    scales: torch.Tensor
    # (out, in) bfloat16: the quantized weights, for many rows; None where the kernel
    # takes every row (bfloat16_weight's: read it through many_rows_mm or dense only)
    dequantized: torch.Tensor | None
    bias: torch.Tensor | None

    def __init__(self, in_features: int, out_features: int, kernel: Kernel) -> None:
        super().__init__()
        if not fits(kernel, out_features, in_features):
            kernel = Kernel.ATEN
        if kernel is not Kernel.ATEN:
            extension(kernel)  # refuse a kernel that did not build, here, not at a step
        self.in_features, self.out_features, self.kernel = in_features, out_features, kernel
        self.register_buffer("bias", None)

    def hold(self, packed: torch.Tensor, scales: torch.Tensor, weight: torch.Tensor) -> None:
        """Register the packed weights, and the bfloat16 copy (of `weight`, the quantized
        weights in float) where the kernel leaves rows to it."""
        self.register_buffer("packed", packed)
        self.register_buffer("scales", scales)
        takes_all = few_rows(self.kernel) is None
        self.register_buffer("dequantized", None if takes_all else bfloat16_weight(weight))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        if self.dequantized is None or takes_rows(self.kernel, rows.shape[0]):
            out = self.packed_mm(rows)
        else:
            out = many_rows_mm(rows, self.dequantized)
        out = out.to(x.dtype)
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.out_features)

    def packed_mm(self, rows: torch.Tensor) -> torch.Tensor:
        """(n, in) rows of any float dtype -> (n, out)."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        name = type(self).__name__.removesuffix("Linear").lower()
        shape = f"in_features={self.in_features}, out_features={self.out_features}"
        return f"{shape}, {name}, {self.kernel}"


class Int4Linear(PackedLinear):
    """(out, in) weight held as int4 groups along `in` (q * d + m, Q4_1's rule), packed
    in its kernel's layout (packed.pack_int4)."""

    def __init__(self, weight: torch.Tensor, kernel: Kernel = Kernel.ATEN) -> None:
        out_features, in_features = weight.shape
        if in_features % GROUP_SIZE:
            raise ValueError(f"in_features {in_features} is not a multiple of {GROUP_SIZE}")
        super().__init__(in_features, out_features, kernel)
        q, scale, low = quantize_int4(weight.float())
        packed, scales = pack_int4(q, scale, low, self.kernel)
        self.hold(packed, scales, dequantize_int4(q, scale, low))

    def packed_mm(self, rows: torch.Tensor) -> torch.Tensor:
        return int4_mm(self.kernel, rows, self.packed, self.scales)


class Int8Linear(PackedLinear):
    """(out, in) weight held as int8, symmetric, with one scale per output row or per
    group of 32 along `in` as its kernel takes (packed.int8_group), packed in its
    kernel's layout (packed.pack_int8)."""

    def __init__(self, weight: torch.Tensor, kernel: Kernel = Kernel.ATEN) -> None:
        out_features, in_features = weight.shape
        super().__init__(in_features, out_features, kernel)
        group = int8_group(self.kernel, in_features)
        w = weight.float().view(out_features, in_features // group, group)
        scale = w.abs().amax(dim=-1) / 127  # (out, groups)
        safe = torch.where(scale > 0, scale, torch.ones_like(scale)).unsqueeze(-1)
        q = (w / safe).round().clamp(-127, 127)
        packed, scales = pack_int8(q.view(out_features, in_features), scale, self.kernel)
        self.hold(packed, scales, (q * scale.unsqueeze(-1)).view(out_features, in_features))

    def packed_mm(self, rows: torch.Tensor) -> torch.Tensor:
        return int8_mm(self.kernel, rows, self.packed, self.scales)

    def rows(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Weight rows `ids`, (n, in), in `dtype`."""
        return int8_rows(self.packed, self.scales, self.kernel, ids, dtype)


def quantize_int4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, in) float -> q (out, in) int32 in 0..15, and each group's scale d and
    minimum m (out, in / GROUP_SIZE), such that w ~ q * d + m (Q4_1's rule)."""
    out_features, in_features = weight.shape
    groups = weight.view(out_features, in_features // GROUP_SIZE, GROUP_SIZE)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scale = (high - low) / 15
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant group: q = 0
    q = ((groups - low.unsqueeze(-1)) / safe.unsqueeze(-1)).round().clamp(0, 15)
    return q.to(torch.int32).view(out_features, in_features), scale, low


def dequantize_int4(q: torch.Tensor, scale: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    out_features, in_features = q.shape
    groups = q.view(out_features, in_features // GROUP_SIZE, GROUP_SIZE).float()
    return (groups * scale.unsqueeze(-1) + low.unsqueeze(-1)).view(out_features, in_features)


class Int8Embedding(nn.Module):
    """Token embeddings read from int8 rows and their scales: a tied model's own output
    head's (the same values both ways, and no float copy of the table kept)."""

    def __init__(self, rows: Int8Linear, dtype: torch.dtype) -> None:
        super().__init__()
        self.rows, self.dtype = rows, dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.rows.rows(ids, self.dtype)


def quantize_model(model: CausalLM, fused: bool = True, kernel: Kernel | None = None) -> None:
    """Every linear of the decoder layers -> Int4Linear and the output head ->
    Int8Linear, in place. A head tied to the token embeddings also serves the lookups
    (Int8Embedding): the float table goes, 113 MB of the bundled model in float32.
    `kernel`: by default the one measured fastest on this CPU (packed.choose_kernel)."""
    kernel = choose_kernel() if kernel is None else kernel
    for parent in model.model.layers.modules():
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):  # qkv_proj, o_proj, gate_up_proj, down_proj
                linear = Int4Linear(child.weight.detach(), kernel)
                if child.bias is not None:
                    linear.bias = child.bias.detach()
                setattr(parent, name, linear)
    embed = model.model.embed_tokens
    tied = model.lm_head.weight is embed.weight
    head = Int8Linear(model.lm_head.weight.detach(), kernel)
    model.lm_head = head  # type: ignore[assignment]
    if tied:
        model.model.embed_tokens = Int8Embedding(head, embed.weight.dtype)  # type: ignore[assignment]
    kernels = int4_decode_ext() if fused and fused_kernel_takes(model) else None
    if kernels is not None:
        assert isinstance(model, LlamaForCausalLM)
        model.decode_layers = FusedDecodeLayers(model, kernels)


def fused_kernel_takes(model: CausalLM) -> bool:
    """Whether int4_decode.cpp computes this model's layers: Llama's, as they are
    (no biases, q/k norms, windows or soft-caps, SiLU), which Mistral without a
    window is too; other families run their layers' own forward."""
    cfg = model.config
    return (
        isinstance(model, LlamaForCausalLM)
        and not (cfg.qkv_bias or cfg.o_proj_bias or cfg.qk_norm or cfg.layer_windows)
        and cfg.attn_softcap is None
        and cfg.hidden_act == "silu"
    )


class FusedDecodeLayers:
    """Every decoder layer of a step in one native call (engine/kernels/int4_decode.cpp),
    for all-decode steps of as many rows as the linears' kernels take (packed.few_rows):
    the same packed kernels, weights and decode attention as the layers' own forward,
    without a Python call and a dispatch for each of about 25 ops a layer."""

    def __init__(self, model: LlamaForCausalLM, kernels: ModuleType) -> None:
        cfg = model.config
        self.kernels = kernels
        self.heads, self.kv_heads, self.eps = cfg.num_heads, cfg.num_kv_heads, cfg.rms_norm_eps
        self.norms: list[torch.Tensor] = []
        self.linears: list[torch.Tensor] = []
        self.kernels_used: set[Kernel] = set()
        for layer in model.model.layers:
            assert isinstance(layer, DecoderLayer)
            attn, mlp = layer.self_attn, layer.mlp
            self.norms += [layer.input_layernorm.weight, layer.post_attention_layernorm.weight]
            for linear in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj):
                assert isinstance(linear, Int4Linear)
                self.linears += [linear.packed, linear.scales]
                self.kernels_used.add(linear.kernel)

    def takes(self, x: torch.Tensor, kv_caches: torch.Tensor, meta: AttentionMetadata) -> bool:
        rows = x.shape[0]
        return (
            rows > 0
            and all(takes_rows(kernel, rows) for kernel in self.kernels_used)
            and meta.num_decodes == rows
            and meta.decode_slots is not None
            and meta.decode_lens is not None
            and x.dtype == kv_caches.dtype == torch.float32
            and x.device.type == "cpu"
            and kv_caches.is_contiguous()
        )

    def __call__(
        self, x: torch.Tensor, rope: RopeTables, kv_caches: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        cos, sin = (table.reshape(x.shape[0], -1).contiguous() for table in rope)
        return self.kernels.decode_layers(
            x.contiguous(),
            cos,
            sin,
            kv_caches,
            meta.slot_mapping,
            meta.decode_slots,
            meta.decode_lens,
            self.norms,
            self.linears,
            self.heads,
            self.kv_heads,
            self.eps,
        )


def check_quantization(name: str, device: torch.device) -> str:
    if name not in QUANTIZATIONS:
        raise ValueError(f"quantization {name!r} is not supported ({', '.join(QUANTIZATIONS)})")
    if name == "int4" and device.type != "cpu":
        raise ValueError("quantization 'int4' runs on CPU only; on CUDA use --dtype bfloat16")
    return name
