"""GGUF files of each quantization type, as people download them, through the engine.

The tiny Llama and Qwen2 checkpoints (tests/tiny_checkpoints.py) written as GGUF with
the `gguf` package's own quantizers, one type a file (and one mixed file: Q8_0 for
attn_v and ffn_down beside Q4_0, the way Q4_K_M keeps Q6_K there), load with
`--quantization auto` on the path their type takes (README "GGUF types"), hold the
file's weights and answer as the file's float32 does (tiny_gguf.check: the tolerances).
K-quants, which the package cannot write, come from llama.cpp's `llama-quantize` where
one is on the PATH (or named by $LLAMA_QUANTIZE), and are skipped otherwise. On the AVX2
kernel (float32 activations and scales) the int4 layers are the file's weights exactly:
hidden states within 1e-4.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import gguf
import pytest
import torch
import transformers
from tiny_checkpoints import prompts, save_tiny
from tiny_gguf import check, load, write_gguf

from vigil.engine.kernels import packed_matmul_ext
from vigil.engine.loaders import assembly
from vigil.engine.model.attention import AttentionMetadata, PrefillSpan
from vigil.engine.model.packed import Kernel
from vigil.engine.model.quantized import Int4Linear, Int8Linear

T = gguf.GGMLQuantizationType
EXACT_ATOL = 1e-4


def mixed(name: str) -> gguf.GGMLQuantizationType:
    return T.Q8_0 if name.endswith(("attn_v.weight", "ffn_down.weight")) else T.Q4_0


# type -> (how each matrix is written, the path auto takes)
TYPES: dict[str, tuple[Callable[[str], gguf.GGMLQuantizationType], str]] = {
    name: ((lambda _, t=T[name]: t), path)
    for name, path in [
        ("F16", "none"),
        ("BF16", "none"),
        ("Q8_0", "int8"),
        ("Q5_0", "int8"),
        ("Q5_1", "int8"),
        ("Q4_0", "int4"),
        ("Q4_1", "int4"),
    ]
} | {"Q4_0+Q8_0": (mixed, "int4")}


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def checkpoint(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, transformers.PreTrainedModel]:
    folder = tmp_path_factory.mktemp(request.param)
    tied = request.param == "qwen2"  # one tied, one not: the head from either table
    return folder, save_tiny(folder, request.param, {"tie_word_embeddings": tied})


@pytest.mark.slow  # a file written, loaded twice and run on each path: seconds each
@pytest.mark.parametrize("name", list(TYPES))
def test_each_type_runs_on_its_path_and_answers_as_its_file(
    checkpoint: tuple[Path, transformers.PreTrainedModel], name: str
) -> None:
    folder, reference = checkpoint
    types, path = TYPES[name]
    file = folder / f"{name}.gguf"
    write_gguf(file, reference, types)
    auto = check(file, path)
    linears = {type(m) for m in auto.model.model.layers.modules()}
    if path == "int4":
        assert Int4Linear in linears
        assert (Int8Linear in linears) == (name == "Q4_0+Q8_0")  # the finer tensors kept


def llama_quantize() -> str | None:
    return os.environ.get("LLAMA_QUANTIZE") or shutil.which("llama-quantize")


# llama-quantize's types -> the path auto takes (Q4_K_M and Q4_K_S keep some tensors at
# Q6_K / Q5_K, int8 beside the int4 ones)
K_QUANTS = {"Q4_K_M": "int4", "Q4_K_S": "int4", "Q5_K_M": "int8", "Q6_K": "int8"}


@pytest.mark.skipif(
    llama_quantize() is None,
    reason="no llama-quantize on the PATH or in $LLAMA_QUANTIZE (README: GGUF types)",
)
@pytest.mark.parametrize("name", list(K_QUANTS))
def test_k_quants_from_llama_quantize_run_on_their_path_and_answer_as_their_file(
    tmp_path_factory: pytest.TempPathFactory, name: str
) -> None:
    """A K-quant block is 256 weights a row: the tiny Llama made 256 wide. Wider, the
    random model amplifies rounding more (its logits moved by up to 0.34 of the largest
    for Q5_K_M, 0.14 for Q4_K_M): the held weights are the check, the logits' 40% one
    against a misplaced block."""
    folder = tmp_path_factory.mktemp("k-quants")
    wide = {"hidden_size": 256, "intermediate_size": 512, "head_dim": 64}
    source = folder / "f32.gguf"
    write_gguf(source, save_tiny(folder, "llama", wide))
    file = folder / f"{name}.gguf"
    quantizer = llama_quantize()
    assert quantizer is not None
    subprocess.run([quantizer, str(source), str(file), name], check=True, capture_output=True)
    check(file, K_QUANTS[name], tolerance=0.4)


@pytest.mark.skipif(packed_matmul_ext() is None, reason="the packed-matmul extension did not build")
@pytest.mark.parametrize("name", ["Q4_0", "Q4_1"])
@torch.inference_mode()
def test_int4_layers_reproduce_a_4_bit_file_exactly(
    checkpoint: tuple[Path, transformers.PreTrainedModel],
    name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decoder layers alone (the int8 head, and a tied head's lookups, round the
    tables): the same embeddings in, the same hidden states out as the float model of
    the file's weights, on the AVX2 kernel's float32 arithmetic."""
    folder, reference = checkpoint
    file = folder / f"{name}.gguf"
    write_gguf(file, reference, TYPES[name][0])
    monkeypatch.setattr(assembly, "choose_kernel", lambda _: Kernel.AVX2)
    exact, float32 = load(file, "int4"), load(file, "none")
    kernels = {m.kernel for m in exact.model.model.layers.modules() if isinstance(m, Int4Linear)}
    assert kernels == {Kernel.AVX2}
    exact.model.model.embed_tokens = float32.model.model.embed_tokens
    ids = prompts()[2]
    n, cfg = len(ids), exact.config
    meta = AttentionMetadata(torch.arange(n), 0, None, None, None, [PrefillSpan(0, n, 0, None)])
    hidden = [
        lm.model(
            torch.tensor(ids),
            torch.arange(n),
            torch.zeros(cfg.num_layers, 2, n, cfg.num_kv_heads, cfg.head_dim),
            meta,
        )
        for lm in (exact, float32)
    ]
    torch.testing.assert_close(hidden[0], hidden[1], atol=EXACT_ATOL, rtol=0)
