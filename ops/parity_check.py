"""Check a model against transformers before serving it: Vigil's greedy tokens beside
transformers' on the same model and prompt, and the largest logit difference over the
prompt and the tokens generated (teacher-forced on Vigil's tokens).

    .venv/bin/python ops/parity_check.py PATH "The capital of France is" [--tokens 16]

PATH is what `vigil serve` takes: a Hugging Face folder, or a .gguf file (transformers
reads it through `gguf_file=`, which needs the `accelerate` package). Vigil runs in
float32 (its parity reference) unless --quantization says otherwise; the prompt is
tokenized by Vigil and the same ids are given to both. transformers comes with the test
dependencies (`bash ops/install.sh --test`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from vigil.engine.bundled import ModelKind, ModelSource
from vigil.engine.loaders.identify import identify
from vigil.engine.loaders.llm import LanguageModel, load_language_model
from vigil.engine.model.attention import AttentionMetadata, PrefillSpan


@torch.inference_mode()
def vigil_logits(lm: LanguageModel, ids: list[int]) -> torch.Tensor:  # (L, V), one prefill
    cfg, n = lm.config, len(ids)
    kv = torch.zeros(cfg.num_layers, 2, n, cfg.num_kv_heads, cfg.head_dim)
    meta = AttentionMetadata(torch.arange(n), 0, None, None, None, [PrefillSpan(0, n, 0, None)])
    return lm.model.compute_logits(lm.model(torch.tensor(ids), torch.arange(n), kv, meta)).float()


@torch.inference_mode()
def reference_logits(model: transformers.PreTrainedModel, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids])).logits[0].float()  # (L, V)


def greedy(
    logits_of: Callable[[list[int]], torch.Tensor], prompt: list[int], num: int
) -> list[int]:
    tokens = list(prompt)
    for _ in range(num):
        tokens.append(int(logits_of(tokens)[-1].argmax()))
    return tokens[len(prompt) :]


def load_reference(path: Path) -> transformers.PreTrainedModel:
    if path.is_file():
        return transformers.AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        ).eval()
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="a .gguf file or a Hugging Face folder")
    parser.add_argument("prompt", help="the text to continue")
    parser.add_argument("--tokens", type=int, default=16, help="greedy tokens to compare")
    parser.add_argument("--quantization", default="none", choices=("none", "int4", "int8", "auto"))
    args = parser.parse_args()
    files = identify(args.path)  # refuses what Vigil cannot serve, naming why
    if files.kind is not ModelKind.GENERATE:
        raise SystemExit(f"{args.path}: an embedder; this compares generation")
    source = ModelSource(args.path.stem, files.kind, files.format, args.path)
    ours = load_language_model(source, torch.device("cpu"), torch.float32, args.quantization)
    reference = load_reference(args.path)
    prompt = ours.tokenizer.encode(args.prompt)
    vigil_tokens = greedy(lambda ids: vigil_logits(ours, ids), prompt, args.tokens)
    reference_tokens = greedy(lambda ids: reference_logits(reference, ids), prompt, args.tokens)
    ids = prompt + vigil_tokens
    difference = (vigil_logits(ours, ids) - reference_logits(reference, ids)).abs().max()
    same = next(
        (i for i, (a, b) in enumerate(zip(vigil_tokens, reference_tokens, strict=True)) if a != b),
        len(vigil_tokens),
    )
    print(f"precision      {ours.precision.quantization}/{ours.precision.dtype}")
    print(f"prompt ids     {prompt}")
    print(f"vigil          {vigil_tokens}  {ours.tokenizer.decode(vigil_tokens)!r}")
    print(f"transformers   {reference_tokens}")
    print(f"equal tokens   {same} of {args.tokens}")
    print(f"max |logit difference| {float(difference):.3g} (teacher-forced on Vigil's tokens)")
    raise SystemExit(0 if same == args.tokens else 1)


if __name__ == "__main__":
    main()
