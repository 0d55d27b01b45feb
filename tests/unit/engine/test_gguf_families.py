"""Each decoder family from a GGUF file, against transformers on the same checkpoint.

The test writes the GGUF itself with the `gguf` package, as llama.cpp's
convert_hf_to_gguf.py does for that architecture (tests/tiny_gguf.py), float32 tensors.
Vigil's GGUF loader must undo what the converter changed: the engine's greedy tokens
and logits are held to transformers' as for the Hugging Face folders (ATOL, float32).
The same checkpoints as Q4_0 and Q8_0 files run on the int4 and int8 paths.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
import torch
from tiny_checkpoints import CASES, Tiny, assert_engine_matches_reference, save_tiny
from tiny_gguf import check, write_gguf

from vigil.engine.bundled import ModelFormat, ModelKind, ModelSource
from vigil.engine.loaders.llm import load_language_model

# The cases a GGUF file can say: llama.cpp has no key for Qwen2's or Mistral's
# windows, nor for dynamic RoPE.
GGUF_CASES = [
    "qwen2",
    "mistral-no-window",
    "qwen3",
    "phi3",
    "gemma2",
    "gemma3",
    "llama-rope-llama3",
    "llama-rope-yarn",
    "llama-rope-linear",
]

# GGUF has no key for query_pre_attn_scalar: llama.cpp takes head_dim (but for 27B).
GGUF_OVERRIDES = {name: {"query_pre_attn_scalar": 16} for name in ("gemma2", "gemma3")}


@pytest.fixture(scope="module", params=GGUF_CASES)
def tiny_gguf(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    model_type, extra = CASES[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    reference = save_tiny(folder, model_type, extra | GGUF_OVERRIDES.get(request.param, {}))
    path = folder / f"{request.param}.gguf"
    write_gguf(path, reference)
    source = ModelSource(request.param, ModelKind.GENERATE, ModelFormat.GGUF, path)
    return Tiny(load_language_model(source, torch.device("cpu"), torch.float32), reference)


def test_gguf_engine_greedy_and_logits_match_transformers(tiny_gguf: Tiny) -> None:
    assert_engine_matches_reference(tiny_gguf, native_attention=True)


@pytest.mark.slow  # a file written, loaded twice and run on each path: seconds each
@pytest.mark.parametrize("qtype", ["Q4_0", "Q8_0"])
def test_each_architecture_runs_a_quantized_file_as_its_float32(
    tiny_gguf: Tiny, tmp_path: Path, qtype: str
) -> None:
    """Its tensors packed as read (phi3's fused ones, Gemma's tied head) on the path the
    type takes (tests/tiny_gguf.check: the weights held, the logits)."""
    file = tmp_path / f"{qtype}.gguf"
    write_gguf(file, tiny_gguf.reference, lambda _: gguf.GGMLQuantizationType[qtype])
    check(file, {"Q4_0": "int4", "Q8_0": "int8"}[qtype])


def test_an_unknown_gguf_architecture_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "falcon")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    source = ModelSource("m", ModelKind.GENERATE, ModelFormat.GGUF, path)
    refused = r"^m\.gguf: architecture 'falcon' is not supported \(llama, qwen2, qwen3, phi3"
    with pytest.raises(ValueError, match=refused):
        load_language_model(source, torch.device("cpu"), torch.float32)
