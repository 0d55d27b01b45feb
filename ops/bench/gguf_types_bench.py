"""What each GGUF quantization type costs on the path it takes: the weights the packed
kernels hold against the file's own dequantized weights (the `gguf` package's), and the
model's logits with `--quantization auto` against the same file run as float32.

    .venv/bin/python ops/bench/gguf_types_bench.py FILE.gguf ... [--tokens 256]

Per tensor type found in the files' decoder layers: the path (int4 / int8 / float), the
kernel, and the held weights' error relative to the weights' scale, the largest
(max |held - file| / max |file|, per tensor, worst tensor) and overall (RMS of the error /
RMS of the weights). The held weights are read back through the kernel itself, an
identity matrix multiplied by the packed weights (exact for every kernel's activations:
one 1.0 a row). Then per file: auto's choice, and teacher-forced on one text (the
README's opening), the largest logit difference against float32 of the same file and
how often the two pick the same next token.

Files to measure: llama.cpp's `llama-quantize` makes every type from one file
(`--allow-requantize` from a quantized one); ../shared/bench/build_llama_server.sh's
tree builds it (`cmake --build build --target llama-quantize`).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import gguf
import numpy as np
import torch

from vigil.engine.bundled import ModelFormat, ModelKind, ModelSource
from vigil.engine.loaders.gguf import GGUFFile
from vigil.engine.loaders.gguf_blocks import to_codes
from vigil.engine.loaders.llm import LanguageModel, load_language_model
from vigil.engine.model.attention import AttentionMetadata, PrefillSpan
from vigil.engine.model.codes import Int4Codes, Int8Codes, quantize_int4
from vigil.engine.model.packed import choose_kernel
from vigil.engine.model.quantized import Int4Linear, Int8Linear, PackedLinear
from vigil.engine.precision import WeightBits, weight_bits

TEXT = (Path(__file__).parents[2] / "README.md").read_text()[:4000]


def held(linear: PackedLinear) -> torch.Tensor:
    """(out, in) weights as the kernel multiplies them."""
    return linear.packed_mm(torch.eye(linear.in_features)).T


def tensor_errors(path: Path) -> dict[str, list[tuple[float, float, float]]]:
    """type -> per tensor (max |err| / max |w|, sum err^2, sum w^2)."""
    reader = gguf.GGUFReader(str(path))
    kernel = choose_kernel(int8_activations=False)  # auto's
    out: dict[str, list[tuple[float, float, float]]] = {}
    for t in reader.tensors:
        if not t.name.startswith("blk.") or len(t.shape) != 2:
            continue
        raw = np.array(t.data)
        file = torch.from_numpy(np.asarray(gguf.quants.dequantize(raw, t.tensor_type), np.float32))
        file = file.reshape(raw.shape[0], -1)
        bits = weight_bits(t.tensor_type.name)
        if bits is WeightBits.FLOAT:
            ours = file  # held in float32 as read
        else:
            codes = to_codes(raw, t.tensor_type) or quantize_int4(file)
            linear: PackedLinear
            if isinstance(codes, Int4Codes):
                linear = Int4Linear(codes, kernel)
            else:
                assert isinstance(codes, Int8Codes)
                linear = Int8Linear(codes, kernel)
            ours = held(linear)
        err = ours - file
        worst = float(err.abs().max() / file.abs().max().clamp(min=1e-30))
        out.setdefault(t.tensor_type.name, []).append(
            (worst, float(err.double().square().sum()), float(file.double().square().sum()))
        )
    return out


@torch.inference_mode()
def logits(lm: LanguageModel, ids: list[int]) -> torch.Tensor:
    cfg, n = lm.config, len(ids)
    kv = torch.zeros(cfg.num_layers, 2, n, cfg.num_kv_heads, cfg.head_dim)
    meta = AttentionMetadata(torch.arange(n), 0, None, None, None, [PrefillSpan(0, n, 0, None)])
    return lm.model.compute_logits(lm.model(torch.tensor(ids), torch.arange(n), kv, meta))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--tokens", type=int, default=256, help="of the text, teacher-forced")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"kernel: {choose_kernel(int8_activations=False)} (auto's)")
    types: dict[str, list[tuple[float, float, float]]] = {}
    rows = []
    for path in args.files:
        for name, errors in tensor_errors(path).items():
            types.setdefault(name, []).extend(errors)
        source = ModelSource(path.stem, ModelKind.GENERATE, ModelFormat.GGUF, path)
        auto = load_language_model(source, torch.device("cpu"), torch.float32, "auto")
        ids = auto.tokenizer.encode(TEXT)[: args.tokens]
        ours = logits(auto, ids)
        del auto
        reference = logits(
            load_language_model(source, torch.device("cpu"), torch.float32, "none"), ids
        )
        same = float((ours.argmax(-1) == reference.argmax(-1)).float().mean())
        diff = (ours - reference).abs().max(dim=-1).values
        file_types = ", ".join(f"{k} x{v}" for k, v in GGUFFile(path).linear_types().items())
        choice = resolve(path)
        rows.append(
            f"| {path.name} | {file_types} | {choice} | {float(diff.max()):.3f} "
            f"| {statistics.median(diff.tolist()):.3f} | {same:.1%} |"
        )
    print("\n| type | path | tensors | max |err| / max |w| (worst) | RMS err / RMS w |")
    print("|---|---|---|---|---|")
    for name, errors in sorted(types.items()):
        bits = weight_bits(name)
        path = {WeightBits.FOUR: "int4", WeightBits.EIGHT: "int8"}.get(bits, "float32")
        worst = max(e[0] for e in errors)
        rms = (sum(e[1] for e in errors) / sum(e[2] for e in errors)) ** 0.5
        print(f"| {name} | {path} | {len(errors)} | {worst:.2e} | {rms:.2e} |")
    print(f"\nteacher-forced on {args.tokens} tokens, auto against float32 of the same file:")
    print(
        "| file | layer weights (type x count) | auto | max |logit diff| | median of row max "
        "| same top-1 |"
    )
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


def resolve(path: Path) -> str:
    from vigil.engine.precision import resolve_precision

    return resolve_precision("auto", "cpu", "float32", GGUFFile(path).linear_types()).quantization


if __name__ == "__main__":
    main()
