"""What a decoder's weights run as, and why: `--quantization auto` resolved against the
model's own files and the device, as a record a worker can report.

auto's rules (README "Precision"):

    CUDA                         none: weights in --dtype (auto: bfloat16); the int4
                                 and int8 kernels are CPU-only
    CPU, a mostly 4-bit GGUF     int4: its Q4_0 / Q4_1 / Q4_K codes packed as they are
         (Q4_0, Q4_1, Q4_K, ...) (reproduced exactly, Q4_K's scales to float16); its
                                 5-8-bit tensors (Q4_K_M's Q6_K) int8
    CPU, a mostly 5-8-bit GGUF   int8 (Q8_0's layout: Q8_0 and Q5_0 exactly, Q5_1 /
         (Q8_0, Q5_x, Q6_K)      Q5_K / Q6_K requantized per group of 32)
    CPU, float weights           none: --dtype's (auto: float32). bfloat16 is not
         (F16, BF16, F32, a      chosen on CPU: measured slower than float32 at decode
         Hugging Face folder)    batch sizes even where the CPU has native bfloat16
                                 (ops/bench/bf16_bench.py)

auto's int4 and int8 keep activations in float (the packed kernels of
engine/kernels/packed_matmul.h on any CPU with AVX2): rounding them to int8 per group of
32, as the VNNI kernel and llama.cpp do, moved the bundled model's greedy answers off
float32's at near-ties (2 of 10 chat prompts' first tokens; "What is the capital of
France?" under its chat template went from "The capital of France is Paris." to
"L'Étoile, la Marseillaise, ...") and made a prompt served from the prefix cache answer
otherwise than the same prompt computed cold; with float activations 10 of 10 and the
same answer both ways, at a decode step 1.6x the VNNI kernel's at one sequence and 2.6x
at 16 (0.20x and 0.62x float32's; ops/bench/precision_bench.py, AMD EPYC).

An explicit `none`, `int4` or `int8` is taken as asked (int4 and int8 on CPU only), and
an explicit int4 or int8 runs the fastest kernels the CPU has, int8 activations
included: float32 stays the parity reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

import gguf

_FLOAT_TYPES = frozenset({"F32", "F16", "BF16", "F64"})


class WeightBits(StrEnum):
    FOUR = "4-bit"  # at most 5 bits a weight, scales included (Q4_1): the int4 path
    EIGHT = "5-8-bit"  # the int8 path
    FLOAT = "float"


def weight_bits(type_name: str) -> WeightBits:
    """A GGUF type's path by its bits a weight (blocks' scales included)."""
    if type_name in _FLOAT_TYPES:
        return WeightBits.FLOAT
    block_size, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    return WeightBits.FOUR if 8 * type_size / block_size <= 5 else WeightBits.EIGHT


@dataclass(frozen=True, slots=True)
class Precision:
    quantization: str  # none | int4 | int8: what the decoder layers' linears run as
    dtype: str  # of everything else (activations, norms, KV cache): float32, bfloat16, ...
    reason: str  # in words, for the startup log and /v1/models
    # Linears the file holds at 5-8 bits run int8 beside the int4 ones (auto on a
    # mixed file such as Q4_K_M); otherwise every linear is `quantization`.
    keep_finer: bool = False
    # The packed kernels may round activations to int8 (the VNNI kernel, the fastest
    # where the CPU has it); else they keep them float (engine/model/packed.py).
    int8_activations: bool = False


def runs_as(precision: Precision) -> str:
    """In one word: int4, int8, or the float dtype the weights run in."""
    return precision.dtype if precision.quantization == "none" else precision.quantization


def resolve_precision(
    requested: str, device_type: str, dtype: str, linear_types: Mapping[str, int] | None
) -> Precision:
    """`requested`: none | int4 | int8 | auto. `linear_types`: a GGUF's decoder-layer
    matrix types with the weights each holds (GGUFFile.linear_types); None for a
    Hugging Face folder (float weights)."""
    if requested != "auto":
        return Precision(requested, dtype, f"{requested}, as asked", int8_activations=True)
    if device_type != "cpu":
        return Precision(
            "none", dtype, f"auto on {device_type}: {dtype} weights (int4/int8 are CPU kernels)"
        )
    if not linear_types:
        return Precision("none", dtype, f"auto: float weights run as {dtype} on CPU")
    by_bits: dict[WeightBits, int] = {}
    for name, count in linear_types.items():
        bits = weight_bits(name)
        by_bits[bits] = by_bits.get(bits, 0) + count
    most = max(by_bits, key=lambda b: by_bits[b])
    share = by_bits[most] / sum(by_bits.values())
    types = "/".join(t for t in linear_types if weight_bits(t) is most)
    held = f"{share:.0%} of the layers' weights are {most} ({types})"
    if most is WeightBits.FOUR:
        finer = [t for t in linear_types if weight_bits(t) is WeightBits.EIGHT]
        also = f"; its {'/'.join(finer)} tensors int8" if finer else ""
        kernels = f"int4 kernels, float activations{also}"
        return Precision("int4", dtype, f"auto: {held}: {kernels}", keep_finer=True)
    if most is WeightBits.EIGHT:
        return Precision("int8", dtype, f"auto: {held}: int8 kernels, float activations")
    return Precision("none", dtype, f"auto: {held}: run as {dtype} on CPU")
