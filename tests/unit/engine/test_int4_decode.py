"""The fused int4 decode step (engine/kernels/int4_decode.cpp) against the decoder
layers' own forward on the same quantized weights: the same hidden states and KV
writes, only for the steps it is meant for, and bad arguments refused before any read."""

from __future__ import annotations

import pytest
import torch
from quantized_models import quantize_model

from vigil.engine.kernels import int4_decode_ext, packed_matmul_ext, paged_attention_ext
from vigil.engine.model.attention import AttentionMetadata, PrefillSpan
from vigil.engine.model.codes import quantize_int8
from vigil.engine.model.config import DecoderConfig
from vigil.engine.model.llama import LlamaForCausalLM
from vigil.engine.model.packed import Kernel, few_rows
from vigil.engine.model.quantized import (
    FusedDecodeLayers,
    Int8Linear,
    attach_fused_decode,
)

BLOCK = 4
CFG = DecoderConfig(
    vocab_size=256,
    hidden_size=128,
    intermediate_size=256,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
    rope_theta=10000.0,
    rms_norm_eps=1e-5,
    max_position=256,
    tie_word_embeddings=True,
)


MIXED = "vnni+int8"  # VNNI int4 linears, with qkv and down int8 (a Q4_K_M's Q6_K ones)


def kernels_here() -> list[Kernel | str]:
    """ATen's and packed_matmul.h's run on any x86 CPU here; VNNI's where it has VNNI."""
    ext = packed_matmul_ext()
    vnni = ext is not None and ext.has_vnni
    return [Kernel.ATEN, Kernel.AVX2] + ([Kernel.VNNI, MIXED] if vnni else [])


@pytest.fixture(scope="module", params=kernels_here(), ids=str)
def model(request: pytest.FixtureRequest) -> LlamaForCausalLM:
    """The model quantized for each int4 kernel, whichever this CPU would choose."""
    torch.manual_seed(0)
    m = LlamaForCausalLM(CFG)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:  # norms: not all ones, so a norm applied twice shows
                p.uniform_(0.5, 1.5)
    kernel = Kernel.VNNI if request.param == MIXED else Kernel(request.param)
    finer = [(layer.self_attn, "qkv_proj") for layer in m.model.layers]
    finer += [(layer.mlp, "down_proj") for layer in m.model.layers]
    weights = [getattr(parent, name).weight.detach().clone() for parent, name in finer]
    quantize_model(m, kernel=kernel)
    if request.param == MIXED:
        for (parent, name), w in zip(finer, weights, strict=True):
            setattr(parent, name, Int8Linear(quantize_int8(w), kernel))
        attach_fused_decode(m)
    assert isinstance(m.decode_layers, FusedDecodeLayers)
    assert m.decode_layers.kernels_used == {kernel}  # the shapes fit it: no fallback
    return m.eval()


class Batch:
    """Sequences whose KV blocks are scattered over a small cache (block b of sequence i
    is b * n + i for n sequences: interleaved, so a slot mix-up reads another sequence's
    keys)."""

    def __init__(self, lens: list[int]) -> None:
        self.lens = list(lens)
        n, blocks = len(lens), (max(lens) + 8) // BLOCK + 1
        self.tables = [[b * n + i for b in range(blocks)] for i in range(n)]
        num_slots = blocks * n * BLOCK
        self.kv = torch.zeros(CFG.num_layers, 2, num_slots, CFG.num_kv_heads, CFG.head_dim)

    def slot(self, i: int, pos: int) -> int:
        return self.tables[i][pos // BLOCK] * BLOCK + pos % BLOCK

    def prefill(self, model: LlamaForCausalLM) -> None:
        ids, positions, slots, spans, row = [], [], [], [], 0
        for i, n in enumerate(self.lens):
            ids += [(7 * i + 3 * p) % CFG.vocab_size for p in range(n)]
            positions += list(range(n))
            slots += [self.slot(i, p) for p in range(n)]
            spans.append(PrefillSpan(row, n, 0, None))
            row += n
        meta = AttentionMetadata(torch.tensor(slots), 0, None, None, None, spans)
        with torch.inference_mode():
            model(torch.tensor(ids), torch.tensor(positions), self.kv, meta)

    def decode_meta(self) -> AttentionMetadata:
        """One new token per sequence, at its next position."""
        lmax = max(self.lens) + 1
        context = [[self.slot(i, p) for p in range(lmax)] for i in range(len(self.lens))]
        ext = paged_attention_ext()
        return AttentionMetadata(
            slot_mapping=torch.tensor([self.slot(i, n) for i, n in enumerate(self.lens)]),
            num_decodes=len(self.lens),
            decode_slots=torch.tensor(context),
            decode_lens=torch.tensor([n + 1 for n in self.lens]),
            decode_mask=None,
            prefills=[],
            decode_kernel=ext.paged_decode_attention if ext is not None else None,
        )


def decode(model: LlamaForCausalLM, batch: Batch, kv: torch.Tensor, fused: bool) -> torch.Tensor:
    layers = model.decode_layers
    if not fused:
        model.decode_layers = None
    try:
        ids = torch.tensor([(11 * n) % CFG.vocab_size for n in batch.lens])
        with torch.inference_mode():
            return model(ids, torch.tensor(batch.lens), kv, batch.decode_meta())
    finally:
        model.decode_layers = layers


def test_the_fused_decode_kernel_builds_on_this_machine() -> None:
    # The CI machine has a compiler: a silent fallback there would hide a broken build.
    assert int4_decode_ext() is not None


@pytest.mark.parametrize("lens", [[5], [17, 3, 9], [30, 2, 11, 6, 21, 9, 14, 1]])
def test_fused_steps_equal_the_layers_forward(model: LlamaForCausalLM, lens: list[int]) -> None:
    batch = Batch(lens)
    batch.prefill(model)
    for _ in range(3):  # each step reads the keys the step before wrote
        fused_kv, layers_kv = batch.kv.clone(), batch.kv.clone()
        assert model.decode_layers is not None
        assert model.decode_layers.takes(
            torch.zeros(len(lens), CFG.hidden_size), fused_kv, batch.decode_meta()
        )
        fused = decode(model, batch, fused_kv, fused=True)
        layers = decode(model, batch, layers_kv, fused=False)
        # Both run the same int4 kernel on the same activations; what may differ is
        # float summation order in a norm, flipping a bfloat16 rounding (ATen's kernel)
        # or an int8 one (VNNI's).
        assert (fused - layers).norm() <= 1e-3 * layers.norm()
        assert (fused_kv - layers_kv).abs().max() <= 1e-2 * layers_kv.abs().max()
        batch.kv = layers_kv
        batch.lens = [n + 1 for n in batch.lens]


def test_steps_it_is_not_for_take_the_layers(model: LlamaForCausalLM) -> None:
    layers = model.decode_layers
    assert layers is not None
    (kernel,) = layers.kernels_used
    limit = few_rows(kernel)
    x = torch.zeros((limit or 8) + 1, CFG.hidden_size)
    many = Batch([4] * x.shape[0])
    assert layers.takes(x, many.kv, many.decode_meta()) == (limit is None)  # too many rows?
    one = Batch([4])
    mixed = one.decode_meta()
    mixed.prefills = [PrefillSpan(1, 3, 0, None)]
    mixed.num_decodes = 1
    assert not layers.takes(torch.zeros(4, CFG.hidden_size), one.kv, mixed)  # a prefill
    assert not layers.takes(x[:1].bfloat16(), one.kv.bfloat16(), one.decode_meta())
    assert layers.takes(x[:1], one.kv, one.decode_meta())


def test_bad_arguments_are_refused_before_any_read(model: LlamaForCausalLM) -> None:
    layers = model.decode_layers
    assert isinstance(layers, FusedDecodeLayers)
    batch = Batch([6])
    meta = batch.decode_meta()
    assert meta.decode_slots is not None and meta.decode_lens is not None
    x = torch.zeros(1, CFG.hidden_size)
    cos = sin = torch.zeros(1, CFG.head_dim)
    H, KVH, eps = CFG.num_heads, CFG.num_kv_heads, CFG.rms_norm_eps

    def call(**changes: object) -> None:
        args: dict[str, object] = {
            "slot_mapping": meta.slot_mapping,
            "slots": meta.decode_slots,
            "lens": meta.decode_lens,
            "norms": layers.norms,
            "linears": layers.linears,
        }
        args.update(changes)
        layers.kernels.decode_layers(
            x, cos, sin, batch.kv, args["slot_mapping"], args["slots"], args["lens"],
            args["norms"], args["linears"], H, KVH, eps,
        )  # fmt: skip

    num_slots = batch.kv.shape[2]
    with pytest.raises(RuntimeError, match="slot_mapping out of range"):
        call(slot_mapping=torch.tensor([num_slots]))
    with pytest.raises(RuntimeError, match="slots out of range"):
        call(slots=torch.full_like(meta.decode_slots, -1))
    with pytest.raises(RuntimeError, match="lens out of range"):
        call(lens=torch.tensor([meta.decode_slots.shape[1] + 1]))
    with pytest.raises(RuntimeError, match="4 linears"):
        call(linears=layers.linears[:-2])
    swapped = list(layers.linears)
    swapped[0:2], swapped[2:4] = swapped[2:4], swapped[0:2]  # o where qkv belongs
    with pytest.raises(RuntimeError, match="does not match the model"):
        call(linears=swapped)
    wide_scales = list(layers.linears)
    wide_scales[1] = wide_scales[1].double()
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        call(linears=wide_scales)
    if layers.linears[1].dtype == torch.float16:  # VNNI's weights: read as raw memory too
        short = list(layers.linears)
        short[0] = short[0][:, :, :3]
        with pytest.raises(RuntimeError, match=r"\(N / 16, K / 32, [48], 64\) contiguous uint8"):
            call(linears=short)
    if layers.linears[1].dtype == torch.float32:  # packed_matmul's weights: read as raw memory
        short = list(layers.linears)
        short[0] = short[0][:-1]
        with pytest.raises(RuntimeError, match=r"\(N, K / 2\) uint8"):
            call(linears=short)
