"""Each decoder family against transformers' own, on a tiny random checkpoint
(tiny_checkpoints.py makes them and runs the engine), loaded as a Hugging Face folder
through Vigil's loader: the engine's greedy tokens equal transformers' own, and every
logit row it samples from is within ATOL of transformers' at that position (float32),
for each family and each window, soft-cap and RoPE scaling that changes its arithmetic.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from quantized_models import quantize_model
from tiny_checkpoints import (
    CASES,
    SHAPE,
    Tiny,
    assert_engine_matches_reference,
    prompts,
    save_tiny,
)

from vigil.engine.bundled import ModelFormat, ModelKind, ModelSource
from vigil.engine.kernels import packed_matmul_ext
from vigil.engine.loaders.llm import load_language_model
from vigil.engine.model.attention import AttentionMetadata, PrefillSpan
from vigil.engine.model.codes import quantize_int4
from vigil.engine.model.packed import Kernel


def _load(case: str, folder: Path) -> Tiny:
    model_type, extra = CASES[case]
    reference = save_tiny(folder, model_type, extra)
    source = ModelSource(case, ModelKind.GENERATE, ModelFormat.HF, folder)
    return Tiny(load_language_model(source, torch.device("cpu"), torch.float32), reference)


@pytest.fixture(scope="module", params=list(CASES))
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    return _load(request.param, tmp_path_factory.mktemp(request.param))


@pytest.mark.parametrize("native_attention", [True, False], ids=["native", "sdpa"])
def test_engine_greedy_and_logits_match_transformers(tiny: Tiny, native_attention: bool) -> None:
    assert_engine_matches_reference(tiny, native_attention)


@pytest.mark.parametrize("case", ["mistral-window", "phi3"])  # every layer slides
def test_blocks_out_of_every_window_are_given_back_and_reused_without_changing_output(
    case: str, tmp_path: Path
) -> None:
    # 3 prompts + 8 tokens each need 7 + 6 + 4 blocks of 4 at the end; 10 hold them only
    # where the blocks that slid out of the window (6) go back to the pool and are reused.
    tiny = _load(case, tmp_path)
    assert tiny.ours.config.every_layer_window == 6
    run = assert_engine_matches_reference(tiny, native_attention=True, num_blocks=10)
    assert run.num_preemptions == 0


def test_reads_the_family_from_config(tiny: Tiny) -> None:
    cfg, ref = tiny.ours.config, tiny.reference.config
    assert cfg.architecture == ref.model_type
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (3, 4, 2, 16)
    windows = [cfg.window(i) for i in range(cfg.num_layers)]
    expected = [
        ref.sliding_window if t == "sliding_attention" else None
        for t in getattr(ref, "layer_types", None) or ["full_attention"] * 3
    ]
    if ref.model_type in ("mistral", "phi3"):  # every layer slides where a window is set
        expected = [ref.sliding_window] * 3
    assert windows == expected


@torch.inference_mode()
def test_int4_layers_compute_the_float_layers_of_their_own_weights(tiny: Tiny) -> None:
    """--quantization int4 on every family (biases, q/k norms, windows and soft-caps
    included): the same hidden states as the float model holding the int4-rounded
    weights, through the AVX2 kernel, which is exact on float activations."""
    if packed_matmul_ext() is None:
        pytest.skip("the packed-matmul extension did not build here")
    quantized = copy.deepcopy(tiny.ours.model)
    quantize_model(quantized, fused=False, kernel=Kernel.AVX2)
    rounded = copy.deepcopy(tiny.ours.model)
    for module in rounded.model.layers.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.copy_(quantize_int4(module.weight).dequantize())
    if rounded.config.tie_word_embeddings:  # the lookups read the int8 head's rows
        rounded.model.embed_tokens = quantized.model.embed_tokens
    ids = prompts()[2]
    n, cfg = len(ids), rounded.config
    kv = torch.zeros(cfg.num_layers, 2, n, cfg.num_kv_heads, cfg.head_dim)
    meta = AttentionMetadata(torch.arange(n), 0, None, None, None, [PrefillSpan(0, n, 0, None)])
    expected = rounded(torch.tensor(ids), torch.arange(n), kv.clone(), meta)
    got = quantized(torch.tensor(ids), torch.arange(n), kv.clone(), meta)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    ("model_type", "extra", "message"),
    [
        ("gpt2", {}, r"model_type 'gpt2' is not supported for generation \(supported: llama, "),
        (
            "phi3",  # Phi-3.5-mini's scaling, as its config.json writes it
            {"rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [2.0]}},
            r"RoPE scaling 'longrope' is not supported \(default, linear, dynamic, yarn, llama3\)",
        ),
    ],
    ids=["gpt2", "longrope"],
)
def test_an_unsupported_checkpoint_is_refused_naming_the_folder_and_why(
    tmp_path: Path, model_type: str, extra: dict[str, Any], message: str
) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type} | SHAPE | extra))
    source = ModelSource("x", ModelKind.GENERATE, ModelFormat.HF, tmp_path)
    with pytest.raises(ValueError, match=f"^{tmp_path}: {message}"):
        load_language_model(source, torch.device("cpu"), torch.float32)
