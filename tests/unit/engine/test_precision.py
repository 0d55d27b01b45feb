"""`--quantization auto` resolved from the model's own weights and the device: the
table of README "Precision", with a reason for each choice."""

from __future__ import annotations

import pytest

from vigil.engine.bundled import SMOLLM2, bundled_source
from vigil.engine.loaders.gguf import GGUFFile
from vigil.engine.precision import resolve_precision

# (device, the file's decoder-layer types, or None for a Hugging Face folder)
# -> (quantization, keep_finer, words the reason must hold)
TABLE = [
    ("cpu", {"Q4_1": 100}, ("int4", True, ["100%", "4-bit", "Q4_1", "float activations"])),
    ("cpu", {"Q4_0": 100}, ("int4", True, ["Q4_0"])),
    ("cpu", {"Q4_K": 80, "Q6_K": 20}, ("int4", True, ["80%", "Q4_K", "Q6_K tensors int8"])),
    ("cpu", {"Q8_0": 100}, ("int8", False, ["5-8-bit", "Q8_0", "float activations"])),
    ("cpu", {"Q6_K": 60, "Q5_K": 40}, ("int8", False, ["Q6_K/Q5_K"])),
    ("cpu", {"F16": 100}, ("none", False, ["float", "float32"])),
    ("cpu", {"BF16": 90, "Q8_0": 10}, ("none", False, ["90%", "BF16"])),
    ("cpu", None, ("none", False, ["float weights", "float32"])),
    ("cuda", {"Q4_1": 100}, ("none", False, ["cuda", "CPU kernels"])),
]


@pytest.mark.parametrize(("device", "types", "expected"), TABLE)
def test_auto_follows_the_weights_on_cpu_and_is_float_on_cuda(
    device: str, types: dict[str, int] | None, expected: tuple[str, bool, list[str]]
) -> None:
    quantization, keep_finer, words = expected
    precision = resolve_precision("auto", device, "float32", types)
    assert (precision.quantization, precision.keep_finer) == (quantization, keep_finer)
    assert precision.dtype == "float32"
    assert not precision.int8_activations  # auto keeps them float (engine/precision.py)
    for word in words:
        assert word in precision.reason


@pytest.mark.parametrize("asked", ["none", "int4", "int8"])
def test_an_explicit_choice_is_taken_as_asked(asked: str) -> None:
    precision = resolve_precision(asked, "cpu", "float32", {"Q8_0": 1})
    assert (precision.quantization, precision.keep_finer) == (asked, False)
    assert precision.reason == f"{asked}, as asked"
    assert precision.int8_activations  # the fastest kernels, as asked


@pytest.mark.slow  # parses the bundled GGUF's header: seconds
def test_the_bundled_model_resolves_to_int4_on_cpu() -> None:
    file = GGUFFile(bundled_source(SMOLLM2).path)  # the header only: no weights read
    precision = resolve_precision("auto", "cpu", "float32", file.linear_types())
    assert precision.quantization == "int4"
    assert precision.reason.startswith("auto: 100% of the layers' weights are 4-bit (Q4_1)")
