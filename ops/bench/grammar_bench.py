"""Grammar engines for constrained decoding, measured on the bundled SmolLM2 tokenizer.

    .venv/bin/python ops/bench/grammar_bench.py [--only engines,throughput] [--rounds 20]
                                                [--threads 1] [--repeats 3]

1. engines     for xgrammar and llguidance (each where installed; xgrammar is not a Vigil
               dependency: `pip install --no-deps xgrammar apache-tvm-ffi` to compare):
               tokenizer set-up once, compile time cold (first compile of each schema,
               p50/p99 over fresh compilers) and cached (Vigil's LRU), and the per-token
               mask cost at batch 16 (16 matchers walking valid JSON, mask for all 16 rows
               then advance each by one token), p50/p99 per step.
2. throughput  output tok/s at batch 1 and 16 through the engine for free text vs the
               same prompts under a json_schema constraint, greedy, the same number of
               tokens each; and the cost of logprobs with top_logprobs=5 at batch 16.
               Best of --repeats runs, and the sampler's mean time per decode step.

Run it on an idle machine: the numbers are only comparable within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from vigil.engine.bundled import SMOLLM2, bundled_source
from vigil.engine.grammar import GrammarCompiler
from vigil.engine.loaders.gguf import GGUFFile
from vigil.engine.request import Constraint, ConstraintKind
from vigil.engine.tokenizer import Tokenizer

SCHEMAS: dict[str, dict[str, Any]] = {
    "enum object": {
        "type": "object",
        "properties": {
            "colour": {"enum": ["red", "green", "blue"]},
            "size": {"type": "string", "enum": ["S", "M", "L", "XL"]},
        },
        "required": ["colour", "size"],
        "additionalProperties": False,
    },
    "nested+arrays": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "country": {"enum": ["FR", "IT", "DE", "UK"]},
                },
                "required": ["city", "country"],
            },
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
            "scores": {"type": "array", "items": {"type": "number"}},
        },
        "required": ["name", "age", "address", "tags"],
    },
    "tool args": {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "City and country"},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
        },
        "required": ["location", "unit"],
        "additionalProperties": False,
    },
}
VALID_OUTPUT = json.dumps(
    {
        "name": "Ada Lovelace",
        "age": 36,
        "address": {"city": "London", "country": "UK"},
        "tags": ["mathematics", "engines", "poetry"],
        "scores": [9.5, 8.25],
    },
    separators=(",", ":"),  # the compact form the grammar generates
)


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def ms(values: list[float]) -> tuple[str, str]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{statistics.median(ordered) * 1e3:.2f}", f"{p99 * 1e3:.2f}"


def change(value: float, base: float) -> str:
    return f"{(value / base - 1) * 100:+.1f}%"


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# ---- llguidance (Vigil's engine, through vigil.engine.grammar) --------------------


def bench_llguidance(tok: Tokenizer, rounds: int) -> list[list[str]]:
    rows: list[list[str]] = []
    vocab = tok.vocab_size
    warmup = Constraint(ConstraintKind.REGEX, "x")  # builds the compiler's tokenizer

    def fresh() -> GrammarCompiler:
        compiler = GrammarCompiler(tok, vocab)
        compiler.compile(warmup)
        return compiler

    setup_s = timed(fresh)
    constraints = {name: Constraint.json_schema(schema) for name, schema in SCHEMAS.items()} | {
        "json_object": Constraint.json_object()
    }
    for name, constraint in constraints.items():
        cold = []
        for _ in range(rounds):
            compiler = fresh()
            cold.append(timed(lambda c=compiler, k=constraint: c.compile(k)))  # type: ignore[misc]
        warm = fresh()
        warm.compile(constraint)
        cached = [timed(lambda c=warm, k=constraint: c.compile(k)) for _ in range(rounds)]  # type: ignore[misc]
        rows.append(["llguidance", name, f"{setup_s * 1e3:.0f}", *ms(cold), *ms(cached)])
    return rows


def llguidance_mask_cost(tok: Tokenizer, batch: int) -> list[float]:
    from vigil.engine.grammar_masks import GrammarMasks

    compiler = GrammarCompiler(tok, tok.vocab_size)
    grammar = compiler.compile(Constraint.json_schema(SCHEMAS["nested+arrays"]))
    matchers = [grammar.matcher() for _ in range(batch)]
    ids = tok.encode(VALID_OUTPUT)
    logits = torch.zeros(batch, tok.vocab_size)
    masks = GrammarMasks(tok.vocab_size)
    steps = []
    for t in ids:
        t0 = time.perf_counter()
        masks.apply(logits, list(range(batch)), matchers)
        for m in matchers:
            m.advance(t)
        steps.append(time.perf_counter() - t0)
    return steps


# ---- xgrammar (for comparison only) ---------------------------------------------


def bench_xgrammar(tok: Tokenizer, rounds: int, batch: int) -> tuple[list[list[str]], list[float]]:
    import transformers
    import xgrammar as xgr

    vocab = tok.vocab_size
    t0 = time.perf_counter()
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tok.backend)
    info = xgr.TokenizerInfo.from_huggingface(
        hf, vocab_size=vocab, stop_token_ids=sorted(tok.eos_token_ids)
    )
    setup_s = time.perf_counter() - t0
    rows = []

    def compile_one(c: Any, name: str) -> Any:
        if name == "json_object":
            return c.compile_builtin_json_grammar()
        return c.compile_json_schema(json.dumps(SCHEMAS[name]))

    for name in [*SCHEMAS, "json_object"]:
        cold = []
        for _ in range(rounds):
            compiler = xgr.GrammarCompiler(info, cache_enabled=False)
            cold.append(timed(lambda c=compiler, n=name: compile_one(c, n)))  # type: ignore[misc]
        warm = xgr.GrammarCompiler(info, cache_enabled=True)
        compile_one(warm, name)
        cached = [timed(lambda c=warm, n=name: compile_one(c, n)) for _ in range(rounds)]  # type: ignore[misc]
        rows.append(["xgrammar", name, f"{setup_s * 1e3:.0f}", *ms(cold), *ms(cached)])
    compiled = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(SCHEMAS["nested+arrays"]))
    matchers = [xgr.GrammarMatcher(compiled) for _ in range(batch)]
    bitmask = xgr.allocate_token_bitmask(batch, vocab)
    logits = torch.zeros(batch, vocab)
    indices = list(range(batch))
    steps = []
    for t in tok.encode(VALID_OUTPUT):
        t0 = time.perf_counter()
        for i, m in enumerate(matchers):
            m.fill_next_token_bitmask(bitmask, i)
        xgr.apply_token_bitmask_inplace(logits, bitmask, indices=indices)
        for m in matchers:
            m.accept_token(t)
        steps.append(time.perf_counter() - t0)
    return rows, steps


def engines(tok: Tokenizer, rounds: int) -> None:
    batch = 16
    rows = bench_llguidance(tok, rounds)
    mask_rows = [["llguidance", *ms(llguidance_mask_cost(tok, batch))]]
    try:
        xrows, xsteps = bench_xgrammar(tok, rounds, batch)
        rows += xrows
        mask_rows.append(["xgrammar", *ms(xsteps)])
    except ImportError as exc:
        print(f"(xgrammar not installed: {exc})")
    table(
        f"compile time, ms ({rounds} rounds; cold = a fresh compiler each time)",
        ["engine", "schema", "tokenizer setup", "cold p50", "cold p99", "cached p50", "cached p99"],
        rows,
    )
    table(
        f"mask for {batch} rows + advance each by one token, per step, ms",
        ["engine", "p50", "p99"],
        mask_rows,
    )


# ---- through the engine ------------------------------------------------------------


def throughput(threads: int, repeats: int) -> None:
    from vigil.engine.async_engine import AsyncLLMEngine
    from vigil.engine.llm_engine import EngineConfig, LLMEngine
    from vigil.engine.loaders.llm import load_language_model
    from vigil.engine.request import (
        GenerationRequest,
        RequestClock,
        RequestId,
        SamplingParams,
        TokenEvent,
    )
    from vigil.engine.stats import StepStats
    from vigil.engine.tokenizer import ChatMessage

    torch.set_num_threads(threads)
    lm = load_language_model(bundled_source(SMOLLM2), torch.device("cpu"), torch.float32)
    steps: list[StepStats] = []
    engine = AsyncLLMEngine(LLMEngine(lm, EngineConfig(max_num_seqs=16)), on_step=steps.append)
    schema = Constraint.json_schema(SCHEMAS["nested+arrays"])
    output_tokens = 48
    people = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Marie Curie"]

    def prompt(i: int) -> list[int]:
        text = lm.tokenizer.render_chat(
            [ChatMessage("user", f"Describe {people[i % 4]} as a JSON record, request {i}.")]
        )
        return lm.tokenizer.encode(text)

    async def one(i: int, params: SamplingParams) -> int:
        req = GenerationRequest(
            RequestId(f"r{i}-{time.monotonic_ns()}"),
            prompt(i),
            params,
            clock=RequestClock(time.monotonic()),
        )
        n = 0
        async for event in engine.generate(req):
            if isinstance(event, TokenEvent):
                n += len(event.token_ids)
        return n

    async def run(params: list[SamplingParams]) -> tuple[float, list[int]]:
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(one(i, p) for i, p in enumerate(params)))
        return sum(counts) / (time.perf_counter() - t0), list(counts)

    async def measure(params: list[SamplingParams]) -> tuple[float, float]:
        """Best tok/s of `repeats` runs (contention only ever slows a run down) and
        the mean sampler time per decode step (grammar masks and logprobs included)."""
        del steps[:]
        best = max([(await run(params))[0] for _ in range(repeats)])
        decodes = [s for s in steps if s.num_decodes == s.num_seqs]
        return best, statistics.mean(s.sample_s for s in decodes) * 1e3

    def row(
        c: int, mode: str, result: tuple[float, float], n: int, base: float | None
    ) -> list[str]:
        tok_s, sample_ms = result
        vs = "" if base is None else change(tok_s, base)
        return [str(c), mode, f"{tok_s:.1f}", f"{sample_ms:.2f}", str(n), vs]

    async def main() -> list[list[str]]:
        engine.start()
        constrained = SamplingParams(max_tokens=output_tokens, temperature=0.0, constraint=schema)
        await run([constrained, constrained])  # warm-up (and the grammar's first compile)
        rows = []
        for c in (1, 16):
            # The constrained requests end when their JSON is complete; the free ones then
            # make exactly as many tokens each, so both runs do the same work.
            _, counts = await run([constrained] * c)
            free_params = [
                SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in counts
            ]
            free = await measure(free_params)
            json_ = await measure([constrained] * c)
            rows.append(row(c, "free", free, sum(counts), None))
            rows.append(row(c, "json_schema", json_, sum(counts), free[0]))
        sampled = SamplingParams(max_tokens=output_tokens, temperature=0.7, ignore_eos=True, seed=1)
        logprobs = SamplingParams(
            max_tokens=output_tokens, temperature=0.7, ignore_eos=True, seed=1, logprobs=5
        )
        plain = await measure([sampled] * 16)
        with_lp = await measure([logprobs] * 16)
        rows.append(row(16, "sampled t=0.7", plain, 16 * output_tokens, None))
        rows.append(row(16, "+ top_logprobs=5", with_lp, 16 * output_tokens, plain[0]))
        engine.stop()
        return rows

    rows = asyncio.run(main())
    table(
        f"output tok/s through the engine ({threads} thread(s), {output_tokens} tokens max)",
        [
            "concurrency",
            "mode",
            f"tok/s (best of {repeats})",
            "sample ms/step",
            "tokens",
            "vs row above",
        ],
        rows,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="engines,throughput")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    only = set(args.only.split(","))
    tok = GGUFFile(bundled_source(SMOLLM2).path).tokenizer()
    if "engines" in only:
        engines(tok, args.rounds)
    if "throughput" in only:
        throughput(args.threads, args.repeats)


if __name__ == "__main__":
    main()
