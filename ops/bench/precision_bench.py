"""Decode-step time of `--dtype bfloat16`, `--quantization int4`, `int8` and `auto` (the
default: the bundled file's int4 codes, kernels that keep activations float) against
float32, in one process.

    .venv/bin/python ops/bench/precision_bench.py [--modes bfloat16,int4,int8,auto] [--batch 1,4,16]
        [--rounds 6] [--steps 8] [--threads 1] [--prefill-tokens 256]

For each batch size, one engine per mode holds that many sequences (16-token prompts,
greedy, EOS ignored), all decoding. Then the engines take turns: each round times
`--steps` decode steps of each (the order flips every round), so a machine whose load
changes during the run slows all alike. Prints the median step time of each mode, its
ratio to float32 and the spread of the per-round ratios; then one prompt's prefill
(`--prefill-tokens`), alternated the same way.

Whether bfloat16 pays on CPU depends on the CPU: with AVX-512 BF16 or AMX, oneDNN runs
bfloat16 matmuls natively; without them (AVX2 only) torch converts and is slower than
float32. The table's first line says which kind this machine is. `--quantization auto`
serves float weights as float32 on CPU from this table (README "Precision").
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from vigil.engine.bundled import SMOLLM2, bundled_source
from vigil.engine.llm_engine import EngineConfig, LLMEngine
from vigil.engine.loaders.llm import LanguageModel, load_language_model
from vigil.engine.model.packed import native_bfloat16
from vigil.engine.request import GenerationRequest, RequestId, SamplingParams

PROMPT_TOKENS = 16
BASELINE = "float32"
MODES = {  # name -> load_language_model's dtype and quantization
    "float32": (torch.float32, "none"),
    "bfloat16": (torch.bfloat16, "none"),
    "int4": (torch.float32, "int4"),
    "int8": (torch.float32, "int8"),
    "auto": (torch.float32, "auto"),  # the bundled file's int4, on float activations
}


def decoding_engine(lm: LanguageModel, batch: int, max_tokens: int) -> LLMEngine:
    """An engine with `batch` sequences past their prefill, each decoding every step."""
    engine = LLMEngine(lm, EngineConfig(enable_prefix_caching=False))
    rng = random.Random(batch)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    for i in range(batch):
        prompt = [rng.randrange(100, 40_000) for _ in range(PROMPT_TOKENS)]
        engine.add_request(GenerationRequest(RequestId(f"d{i}"), prompt, params))
    while True:
        engine.step()
        last = engine.stats().last_step
        if last is not None and last.num_decodes == batch:
            return engine


def timed_steps(engine: LLMEngine, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        engine.step()
        out.append(time.perf_counter() - t0)
    return out


def bench_batch(models: dict[str, LanguageModel], batch: int, rounds: int, steps: int) -> list[str]:
    engines = {name: decoding_engine(lm, batch, rounds * steps + 8) for name, lm in models.items()}
    times: dict[str, list[float]] = {name: [] for name in models}
    ratios: dict[str, list[float]] = {name: [] for name in models if name != BASELINE}
    for r in range(rounds):
        order = list(models) if r % 2 == 0 else list(reversed(models))
        medians = {}
        for name in order:
            samples = timed_steps(engines[name], steps)
            times[name].extend(samples)
            medians[name] = statistics.median(samples)
        for name in ratios:
            ratios[name].append(medians[name] / medians[BASELINE])
    base = statistics.median(times[BASELINE])
    row = [str(batch), f"{base * 1000:.1f}"]
    for name, per_round in ratios.items():
        t = statistics.median(times[name])
        row += [f"{t * 1000:.1f}", f"{t / base:.2f} ({min(per_round):.2f}-{max(per_round):.2f})"]
    return row


def bench_prefill(models: dict[str, LanguageModel], tokens: int, rounds: int) -> str:
    """One prompt's prefill, alternated the same way: each mode's time and its ratio."""
    times: dict[str, list[float]] = {name: [] for name in models}
    prompt = [random.Random(0).randrange(100, 40_000) for _ in range(tokens)]
    params = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    for r in range(rounds):
        for name in list(models) if r % 2 == 0 else list(reversed(models)):
            engine = LLMEngine(models[name], EngineConfig(enable_prefix_caching=False))
            engine.add_request(GenerationRequest(RequestId("p"), prompt, params))
            times[name].extend(timed_steps(engine, 1))
    base = statistics.median(times[BASELINE])
    cells = [f"{BASELINE} {base:.2f} s"] + [
        f"{name} {statistics.median(t):.2f} s ({statistics.median(t) / base:.2f}x)"
        for name, t in times.items()
        if name != BASELINE
    ]
    return f"{tokens}-token prefill: " + ", ".join(cells)


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="bfloat16,int4,int8", help=f"of {', '.join(MODES)}")
    parser.add_argument("--batch", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prefill-tokens", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cpu = torch.device("cpu")
    source = bundled_source(SMOLLM2)
    modes = args.modes.split(",")
    if modes[0] != BASELINE:
        modes.insert(0, BASELINE)
    models = {name: load_language_model(source, cpu, *MODES[name]) for name in modes}
    native = "yes" if native_bfloat16() else "no"
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), {cpu_model()}, "
        f"kernels {torch.backends.cpu.get_cpu_capability()}, native bfloat16: {native}"
    )
    rows = [bench_batch(models, int(b), args.rounds, args.steps) for b in args.batch.split(",")]
    header = ["batch", f"{BASELINE} ms/step"]
    for name in modes[1:]:
        header += [f"{name} ms/step", f"/{BASELINE} (rounds)"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\nDecode step, median of {args.rounds} x {args.steps} alternated steps per mode")
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    print(f"\n{bench_prefill(models, args.prefill_tokens, rounds=3)} (median of 3 each)")


if __name__ == "__main__":
    main()
