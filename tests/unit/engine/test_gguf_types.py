"""GGUF files of each quantization type, as people download them, through the engine.

The tiny Llama and Qwen2 checkpoints (tests/tiny_checkpoints.py) written as GGUF with
the `gguf` package's own quantizers, one type a file (and one mixed file: Q8_0 for
attn_v and ffn_down beside Q4_0, the way Q4_K_M keeps Q6_K there), load with
`--quantization auto` on the path their type takes (README "GGUF types"). Held to the
same file loaded as float32 (`none`: its own dequantized weights), teacher-forced on
the engine's greedy tokens:

- on the AVX2 kernel (float32 activations and scales) the int4 layers are the file's
  weights exactly: hidden states within 1e-4;
- on the kernel this CPU runs (VNNI: activations rounded to int8 per group of 32),
  logits within 15% of the largest logit. These random models amplify any rounding
  (weights of 0.2 deviation; Q8_0's own 0.4% weight error moves their logits by
  0.4 of 6.5): a misplaced block or row would move them by all of it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import pytest
import torch
import transformers
from tiny_checkpoints import prompts, run_engine, save_tiny
from tiny_gguf import write_gguf

from vigil.engine.bundled import ModelFormat, ModelKind, ModelSource
from vigil.engine.kernels import packed_matmul_ext
from vigil.engine.loaders import assembly
from vigil.engine.loaders.llm import LanguageModel, load_language_model
from vigil.engine.model.attention import AttentionMetadata, PrefillSpan
from vigil.engine.model.packed import Kernel
from vigil.engine.model.quantized import Int4Linear, Int8Linear
from vigil.engine.request import RequestId

T = gguf.GGMLQuantizationType
RELATIVE_TOLERANCE = 0.15
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


def load(path: Path, quantization: str) -> LanguageModel:
    source = ModelSource(path.stem, ModelKind.GENERATE, ModelFormat.GGUF, path)
    return load_language_model(source, torch.device("cpu"), torch.float32, quantization)


@torch.inference_mode()
def logits_of(lm: LanguageModel, ids: list[int]) -> torch.Tensor:  # (L, V), one prefill
    cfg, n = lm.config, len(ids)
    kv = torch.zeros(cfg.num_layers, 2, n, cfg.num_kv_heads, cfg.head_dim)
    meta = AttentionMetadata(torch.arange(n), 0, None, None, None, [PrefillSpan(0, n, 0, None)])
    return lm.model.compute_logits(lm.model(torch.tensor(ids), torch.arange(n), kv, meta))


def worst_difference(ours: LanguageModel, reference: LanguageModel) -> tuple[float, float]:
    """The engine's greedy run of `ours` (decodes, fused where it can), each logit row
    against `reference`'s at the same position of the same tokens: (largest difference,
    largest |logit| of the reference)."""
    asked = prompts()
    run = run_engine(ours, asked, native_attention=True)
    worst = scale = 0.0
    for i, prompt in enumerate(asked):
        request = RequestId(f"r{i}")
        expected = logits_of(reference, prompt + run.tokens[request])
        for j, row in enumerate(run.rows[request]):
            at = expected[len(prompt) + j - 1]
            worst = max(worst, float((row - at).abs().max()))
            scale = max(scale, float(at.abs().max()))
    return worst, scale


@pytest.mark.parametrize("name", list(TYPES))
def test_each_type_runs_on_its_path_and_answers_as_its_file(
    checkpoint: tuple[Path, transformers.PreTrainedModel], name: str
) -> None:
    folder, reference = checkpoint
    types, path = TYPES[name]
    file = folder / f"{name}.gguf"
    write_gguf(file, reference, types)
    auto = load(file, "auto")
    assert auto.precision.quantization == path
    linears = {type(m) for m in auto.model.model.layers.modules()}
    if path == "int4":
        assert Int4Linear in linears
        assert (Int8Linear in linears) == (name == "Q4_0+Q8_0")  # the finer tensors kept
    worst, scale = worst_difference(auto, load(file, "none"))
    print(f"{name} ({path}): max |logit diff| {worst:.3g} of {scale:.3g}")
    assert worst <= RELATIVE_TOLERANCE * scale


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
    monkeypatch.setattr(assembly, "choose_kernel", lambda: Kernel.AVX2)
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
