"""Weight-only int4 linears (`--quantization int4`), for decoding on CPU.

At the batch sizes of decoding a step's time is the time to read the weights, so
fewer bytes per weight is the speed-up: 4 bits and a scale and zero per group of 32
(0.56 bytes a weight, against float32's 4). That is the layout of the GGUF Q4_1 the
bundled model ships in (each group's w = q * d + m, q in 0..15), so quantizing its
dequantized weights gives back the same q, d and m: int4 loses nothing of such a
model, only bfloat16 rounding of d and m and of the activations.

The output head is int8 (per output row, symmetric), not int4: the bundled model
ties it to its token embeddings, which ship as Q8_0, and int4 groups of them cost 4.6%
of perplexity on the parity text where int8 rows cost 0.2%. Tied, the same int8 rows
serve the embedding lookups, so no float copy of the table is kept.

Two kernels per linear, chosen per call by the number of rows (tokens) in the step:

    rows <= few_rows   a packed weight-only matmul reading the packed weights: PyTorch's
                       (_weight_int4pack_mm_for_cpu, _weight_int8pack_mm; bfloat16
                       activations; up to FEW_ROWS), or on a CPU whose widest vectors
                       are AVX2 our own (engine/kernels/packed_matmul.h; float32
                       activations; up to OWN_FEW_ROWS)
    more rows          a matmul on the same weights dequantized once at load to
                       bfloat16: in bfloat16 where the CPU runs it natively (oneDNN on
                       AVX-512 BF16 or AMX), else in float32, each weight converted
                       when its linear runs

because the packed kernels' cost grows with the rows while a bfloat16 matmul's barely
does until the rows fill its tiles. Where they cross depends on where the weights are
read from: one layer's linears, timed alone with their weights in cache, crossed at 6-10
rows; the whole model's, whose bfloat16 copy (212 MB) is read from memory every step,
at about 16 (AMD EPYC, one thread: 8 decodes 18-23 ms packed and fused against 39-42 ms
in bfloat16, 8-token prefills 20-31 against 37-41 ms, 16 decodes 40 ms either way; the
int8 head at 8 rows 3.8-4.2 against 5.4-7.1 ms). Both compute with the same quantized
weights; the bfloat16 copy doubles as the prefill weights, so an int4 linear takes 2.6
bytes a weight, below float32's 4.

A CPU without native bfloat16 (AVX2 only) converts each element of a bfloat16 matmul:
there it took 2.5-3x the float32 model's time from 8 to 64 rows (AMD EPYC, AVX2, the
model's linears at 16 rows: 817 ms against 212 ms). Converting the weights to float32
as each linear runs costs 5-80% over float32 weights held whole (383 ms at 16 rows,
601 against 552 at 64) and holds no second copy. There, too, PyTorch's packed kernels
unpack every weight again for each row, so their time grows in step with the rows
(the linears: 29 ms at 1 row, 119 at 8, 241 at 16; the head 8.0, 30.7, 61.1):
packed_matmul.h unpacks a weight once for up to 8 rows (26, 68, 126 ms; the head 4.8,
14.6, 29.2) and stays ahead of the float32 path to about 64 rows (496 against 516 ms),
so there OWN_FEW_ROWS is 48. A whole decode step against the float32 model's
(precision_bench): 0.41x at 1 row, 0.33x at 4, 0.41x at 8, 0.61x at 16 and 0.74x at 32,
where PyTorch's packed kernels took 0.60x at 1, 0.75x at 8 and 0.99x at 16; a 256-token
prefill 1.03x (through the converted bfloat16 matmul a 32-token one took 3.1x).

Inputs and outputs keep the model's dtype (float32 by default: norms, RoPE, attention
and the KV cache stay float32); only PyTorch's kernels round a matmul's activations to
bfloat16. CPU only: the CUDA int4 kernel packs weights differently and is not wired
here.

A step of up to few_rows rows that are all decodes runs every decoder layer in one
native call (FusedDecodeLayers, engine/kernels/int4_decode.cpp): the same packed kernel
and weights, with the ops between the matmuls as loops in C++. At one row that cut a
step from 15.8 to 10.7 ms: about 25 ops a layer, each a Python call and a dispatch,
had been a third of it.
"""

from __future__ import annotations

from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from vigil.engine.kernels import int4_decode_ext, packed_matmul_ext
from vigil.engine.model.attention import AttentionMetadata
from vigil.engine.model.config import QUANTIZATIONS
from vigil.engine.model.llama import DecoderLayer, LlamaForCausalLM, RopeTables


def native_bfloat16() -> bool:
    """Whether oneDNN runs bfloat16 matmuls natively on this CPU (AVX-512 BF16, AMX)."""
    try:  # private, but the one place torch says so
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


GROUP_SIZE = 32
MANY_ROWS_IN_BFLOAT16 = native_bfloat16()  # else in float32
# Up to these many rows the packed kernels: ATen's, crossing the many-rows path at ~16
# rows against native bfloat16 or float32; packed_matmul.cpp's (AVX2) at ~64.
FEW_ROWS = 8 if MANY_ROWS_IN_BFLOAT16 else 16
OWN_FEW_ROWS = 48


def few_rows(kernel: ModuleType | None) -> int:
    """The most rows a step sends to `kernel` (None: ATen's packed kernels)."""
    return FEW_ROWS if kernel is None else OWN_FEW_ROWS


def padded_rows(n: int) -> int:
    """Rows a bfloat16 matmul of n rows is run with: up to 128 the next multiple of 16,
    beyond it of 64. oneDNN builds and caches a kernel (and its scratch memory) for every
    shape it meets, so steps of every possible length grew a worker by 216 MB in a
    6-minute soak, still growing at the end; padded, a model's linears meet at most
    8 + 30 shapes each up to 2,048 rows, and the cache stays small. The pad costs at most
    15 rows up to 128, and under 50% (3% at 2,048) beyond."""
    step = 16 if n <= 128 else 64
    return -(-n // step) * step


PACKED_FOR_ROWS = 64  # oneDNN's layout hint: the rows a many-rows matmul is tuned for


def bfloat16_weight(weight: torch.Tensor) -> torch.Tensor:
    """An (out, in) weight in bfloat16 for the many-rows matmuls: where the CPU runs
    bfloat16 natively, in oneDNN's own blocked layout, into which F.linear would reorder a
    plain weight again on every call (the bundled model's linears, Intel Xeon with AMX,
    one thread: 60 -> 45 ms at 16 rows, 95 -> 50 at 64, 224 -> 144 at 256; the same
    results). Such a tensor is opaque and read only: in-place ops on it crash."""
    plain = weight.to(torch.bfloat16).contiguous()
    if not native_bfloat16():
        return plain
    return torch.ops.mkldnn._reorder_linear_weight(plain, PACKED_FOR_ROWS)


def bfloat16_linear(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """rows (bfloat16) @ a bfloat16_weight's transpose."""
    if weight.is_mkldnn:
        return torch.ops.mkldnn._linear_pointwise(rows, weight, None, "none", [], "")
    return F.linear(rows, weight)


def dense(weight: torch.Tensor) -> torch.Tensor:
    """A bfloat16_weight as a plain tensor."""
    return weight.to_dense() if weight.is_mkldnn else weight


class PackedLinear(nn.Module):
    """A bias-free linear: packed weights for few rows, bfloat16-held ones for many.
    `kernel`: packed_matmul.cpp for the few rows, else ATen's packed kernel."""

    dequantized: torch.Tensor  # (out, in) bfloat16: the quantized weights, for many rows
    # (bfloat16_weight's: read it through bfloat16_linear or dense only)

    def __init__(self, in_features: int, out_features: int, kernel: ModuleType | None) -> None:
        super().__init__()
        self.in_features, self.out_features, self.kernel = in_features, out_features, kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        n = rows.shape[0]
        if n <= few_rows(self.kernel):
            out = self.packed_mm(rows)
        elif MANY_ROWS_IN_BFLOAT16:
            padded = F.pad(rows.to(torch.bfloat16), (0, 0, 0, padded_rows(n) - n))
            out = bfloat16_linear(padded, self.dequantized)[:n]
        else:
            out = F.linear(rows.float(), dense(self.dequantized).float())
        return out.to(x.dtype).view(*x.shape[:-1], self.out_features)

    def packed_mm(self, rows: torch.Tensor) -> torch.Tensor:
        """(n, in) rows of any float dtype -> (n, out)."""
        raise NotImplementedError


class Int4Linear(PackedLinear):
    """(out, in) weight held as int4 groups along `in`, packed for one of two kernels:

    ATen's    packed (out, in / 2) uint8 in _convert_weight_to_int4pack_for_cpu's
              layout; scales (in / 32, out, 2) bfloat16: d and m + 8 d, as it wants
    own       (`kernel`: packed_matmul.cpp, for AVX2 CPUs) packed (out, in / 2) uint8,
              byte j of a group holding weights j and j + 16; scales (out, in / 32, 2)
              float32: d and m
    """

    packed: torch.Tensor
    scales: torch.Tensor

    def __init__(self, weight: torch.Tensor, kernel: ModuleType | None = None) -> None:
        out_features, in_features = weight.shape
        super().__init__(in_features, out_features, kernel)
        if in_features % GROUP_SIZE:
            raise ValueError(f"in_features {in_features} is not a multiple of {GROUP_SIZE}")
        q, scale, low = quantize_int4(weight.float())
        if kernel is None:
            packed = torch._convert_weight_to_int4pack_for_cpu(q, 1)
            # The kernel computes (q - 8) * scale + zero: zero = m + 8 d gives q * d + m.
            pairs = torch.stack([scale, low + 8 * scale], dim=-1).transpose(0, 1)
            scales = pairs.contiguous().to(torch.bfloat16)
        else:
            halves = q.view(out_features, -1, 2, GROUP_SIZE // 2).to(torch.uint8)
            packed = (halves[:, :, 0] | (halves[:, :, 1] << 4)).reshape(out_features, -1)
            scales = torch.stack([scale, low], dim=-1).contiguous()
        self.register_buffer("packed", packed.contiguous())
        self.register_buffer("scales", scales)
        self.register_buffer("dequantized", bfloat16_weight(dequantize_int4(q, scale, low)))

    def packed_mm(self, rows: torch.Tensor) -> torch.Tensor:
        if self.kernel is not None:
            return self.kernel.int4_mm(rows.float(), self.packed, self.scales)
        bf16 = rows.to(torch.bfloat16)
        return torch._weight_int4pack_mm_for_cpu(bf16, self.packed, GROUP_SIZE, self.scales)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4"


class Int8Linear(PackedLinear):
    """(out, in) weight held as int8 with one scale per output row (symmetric)."""

    packed: torch.Tensor  # (out, in) int8
    scales: torch.Tensor  # (out,) bfloat16

    def __init__(self, weight: torch.Tensor, kernel: ModuleType | None = None) -> None:
        out_features, in_features = weight.shape
        whole_groups = in_features % GROUP_SIZE == 0  # what packed_matmul.cpp takes
        super().__init__(in_features, out_features, kernel if whole_groups else None)
        w = weight.float()
        scale = w.abs().amax(dim=1) / 127
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        q = (w / safe.unsqueeze(1)).round().clamp(-127, 127)
        self.register_buffer("packed", q.to(torch.int8))
        self.register_buffer("scales", scale.to(torch.bfloat16))
        self.register_buffer("dequantized", bfloat16_weight(q * scale.unsqueeze(1)))

    def packed_mm(self, rows: torch.Tensor) -> torch.Tensor:
        if self.kernel is not None:
            return self.kernel.int8_mm(rows.float(), self.packed, self.scales)
        return torch._weight_int8pack_mm(rows.to(torch.bfloat16), self.packed, self.scales)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


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
        q = self.rows.packed.index_select(0, ids).to(self.dtype)
        return q * self.rows.scales.index_select(0, ids).to(self.dtype).unsqueeze(-1)


def quantize_model(model: LlamaForCausalLM, fused: bool = True, own: bool | None = None) -> None:
    """Every linear of the decoder layers -> Int4Linear and the output head ->
    Int8Linear, in place. A head tied to the token embeddings also serves the lookups
    (Int8Embedding): the float table goes, 113 MB of the bundled model in float32.
    `own`: packed_matmul.cpp's kernels rather than ATen's; by default where they were
    measured to pay (own_kernel)."""
    kernel = own_kernel() if own is None else packed_matmul_ext() if own else None
    if own and kernel is None:
        raise RuntimeError("the packed_matmul kernels did not build on this machine")
    for parent in model.model.layers.modules():
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):  # qkv_proj, o_proj, gate_up_proj, down_proj
                setattr(parent, name, Int4Linear(child.weight.detach(), kernel))
    embed = model.model.embed_tokens
    tied = model.lm_head.weight is embed.weight
    head = Int8Linear(model.lm_head.weight.detach(), kernel)
    model.lm_head = head  # type: ignore[assignment]
    if tied:
        model.model.embed_tokens = Int8Embedding(head, embed.weight.dtype)  # type: ignore[assignment]
    kernels = int4_decode_ext() if fused else None
    if kernels is not None:
        model.decode_layers = FusedDecodeLayers(model, kernels)


def own_kernel() -> ModuleType | None:
    """packed_matmul.cpp on a CPU whose widest vectors are AVX2, where ATen's packed
    kernel unpacks every weight again for each row (the bundled model's linears at 8
    rows: 119 ms against 68, AMD EPYC); None elsewhere: with AVX-512 ATen's is the
    kernel measured (8.1 ms a whole step at one row)."""
    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        return None
    return packed_matmul_ext()


class FusedDecodeLayers:
    """Every decoder layer of a step in one native call (engine/kernels/int4_decode.cpp),
    for steps of up to few_rows(its kernel) rows, all decodes: the same packed kernels, weights and
    decode attention as the layers' own forward, without a Python call and a dispatch
    for each of about 25 ops a layer."""

    def __init__(self, model: LlamaForCausalLM, kernels: ModuleType) -> None:
        cfg = model.config
        self.kernels = kernels
        self.heads, self.kv_heads, self.eps = cfg.num_heads, cfg.num_kv_heads, cfg.rms_norm_eps
        self.norms: list[torch.Tensor] = []
        self.linears: list[torch.Tensor] = []
        self.kernel: ModuleType | None = None
        for layer in model.model.layers:
            assert isinstance(layer, DecoderLayer)
            attn, mlp = layer.self_attn, layer.mlp
            self.norms += [layer.input_layernorm.weight, layer.post_attention_layernorm.weight]
            for linear in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj):
                assert isinstance(linear, Int4Linear)
                self.linears += [linear.packed, linear.scales]
                self.kernel = linear.kernel  # one for all: quantize_model's choice

    def takes(self, x: torch.Tensor, kv_caches: torch.Tensor, meta: AttentionMetadata) -> bool:
        rows = x.shape[0]
        return (
            0 < rows <= few_rows(self.kernel)
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
