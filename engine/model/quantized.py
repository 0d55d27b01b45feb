"""Weight-only int4 and int8 linears (`--quantization int4|int8`), for decoding on CPU.

At the batch sizes of decoding a step's time is the time to read the weights, so
fewer bytes per weight is the speed-up: 4 bits and a scale and zero per group of 32
(0.56-0.63 bytes a weight, against float32's 4). That is the layout of the GGUF Q4_1
the bundled model ships in (each group's w = q * d + m, q in 0..15), and Q4_0's and
Q4_K's are re-expressed in it (model/codes.py): a 4-bit file's own codes are packed
as they are read (loaders/assembly.py), so int4 loses nothing of such a model but the
rounding of the activations (to bfloat16, or to int8 per group of 32 with the VNNI
kernel) and of d and m (bfloat16 for ATen's kernels, float16 for VNNI's, which holds
Q4_0's and Q4_1's own float16 d and m exactly; Q4_K's d times its 6-bit sub-block
scales take 17 bits, rounded to float16's 11). int8 is Q8_0's layout: symmetric, one
scale per group of 32 with the VNNI kernel.

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
from vigil.engine.model.codes import (
    Codes,
    Int4Codes,
    Int8Codes,
    quantize_int8,
)
from vigil.engine.model.config import QUANTIZATIONS
from vigil.engine.model.families import CausalLM
from vigil.engine.model.llama import DecoderLayer, LlamaForCausalLM
from vigil.engine.model.packed import (
    Kernel,
    bfloat16_weight,
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

    def hold(self, packed: torch.Tensor, scales: torch.Tensor, codes: Codes) -> None:
        """Register the packed weights, and the bfloat16 copy (of `codes` in float) where
        the kernel leaves rows to it; where it takes every row, the float weights are
        never made (the bundled model's head alone is 113 MiB of them)."""
        self.register_buffer("packed", packed)
        self.register_buffer("scales", scales)
        takes_all = few_rows(self.kernel) is None
        copy = None if takes_all else bfloat16_weight(codes.dequantize())
        self.register_buffer("dequantized", copy)

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

    def __init__(self, codes: Int4Codes, kernel: Kernel = Kernel.ATEN) -> None:
        out_features, in_features = codes.shape
        super().__init__(in_features, out_features, kernel)
        packed, scales = pack_int4(codes.q, codes.d, codes.m, self.kernel)
        self.hold(packed, scales, codes)

    def packed_mm(self, rows: torch.Tensor) -> torch.Tensor:
        return int4_mm(self.kernel, rows, self.packed, self.scales)


class Int8Linear(PackedLinear):
    """(out, in) weight held as int8, symmetric, with one scale per output row or per
    group of 32 along `in` as its kernel takes (packed.int8_group), packed in its
    kernel's layout (packed.pack_int8). Codes of another grouping are requantized
    to the kernel's."""

    def __init__(self, codes: Int8Codes, kernel: Kernel = Kernel.ATEN) -> None:
        out_features, in_features = codes.shape
        super().__init__(in_features, out_features, kernel)
        group = int8_group(self.kernel, in_features)
        if codes.group != group:
            codes = quantize_int8(codes.dequantize(), group)
        packed, scales = pack_int8(codes.q, codes.d, self.kernel)
        self.hold(packed, scales, codes)

    def packed_mm(self, rows: torch.Tensor) -> torch.Tensor:
        return int8_mm(self.kernel, rows, self.packed, self.scales)

    def rows(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Weight rows `ids`, (n, in), in `dtype`."""
        return int8_rows(self.packed, self.scales, self.kernel, ids, dtype)


class Int8Embedding(nn.Module):
    """Token embeddings read from int8 rows and their scales: a tied model's own output
    head's (the same values both ways, and no float copy of the table kept)."""

    def __init__(self, rows: Int8Linear, dtype: torch.dtype) -> None:
        super().__init__()
        self.rows, self.dtype = rows, dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.rows.rows(ids, self.dtype)


def packed_linear(codes: Codes, bias: torch.Tensor | None, kernel: Kernel) -> PackedLinear:
    linear: PackedLinear
    if isinstance(codes, Int4Codes):
        linear = Int4Linear(codes, kernel)
    else:
        linear = Int8Linear(codes, kernel)
    if bias is not None:
        linear.bias = bias.detach()
    return linear


def quantize_head(model: CausalLM, codes: Int8Codes, dtype: torch.dtype, kernel: Kernel) -> None:
    """The output head -> Int8Linear of `codes`. A head tied to the token embeddings
    also serves the lookups (Int8Embedding): the float table goes, 113 MB of the
    bundled model in float32."""
    head = Int8Linear(codes, kernel)
    model.lm_head = head  # type: ignore[assignment]
    if model.config.tie_word_embeddings:
        model.model.embed_tokens = Int8Embedding(head, dtype)  # type: ignore[assignment]


def attach_fused_decode(model: CausalLM) -> None:
    """FusedDecodeLayers for the all-decode steps, where the native kernel takes the model."""
    kernels = int4_decode_ext() if fused_kernel_takes(model) else None
    if kernels is not None:
        assert isinstance(model, LlamaForCausalLM)
        model.decode_layers = FusedDecodeLayers(model, kernels)


def fused_kernel_takes(model: CausalLM) -> bool:
    """Whether int4_decode.cpp computes this model's layers: Llama's, as they are
    (no biases, q/k norms, windows or soft-caps, SiLU), which Mistral without a
    window is too, with every linear int4, or int8 in the VNNI kernel's layout (a
    file's finer tensors); other models run their layers' own forward."""
    cfg = model.config
    linears = [m for m in model.model.layers.modules() if isinstance(m, PackedLinear)]
    return (
        isinstance(model, LlamaForCausalLM)
        and not (cfg.qkv_bias or cfg.o_proj_bias or cfg.qk_norm or cfg.layer_windows)
        and cfg.attn_softcap is None
        and cfg.hidden_act == "silu"
        and len(linears) == 4 * cfg.num_layers
        and all(isinstance(m, Int4Linear) or m.kernel is Kernel.VNNI for m in linears)
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
                assert isinstance(linear, PackedLinear)
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
    if name in ("int4", "int8") and device.type != "cpu":
        raise ValueError(
            f"quantization {name!r} runs on CPU only; on CUDA use --dtype bfloat16 "
            "(or --quantization auto)"
        )
    return name
