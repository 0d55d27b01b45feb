"""The cost of the HTTP layer: the same requests through `vigil serve` (OpenAI API, SSE)
and through the engine called directly, measured in one run.

    .venv/bin/python ops/bench/http_bench.py [--concurrency 1,16] [--tokens 64] [--runs 2]

For each concurrency C: C requests at once (prompt about 128 tokens, `--tokens` output
tokens, greedy, EOS ignored), repeated `--runs` times after a warm-up. Prints output
tokens/s and p50 TTFT for both paths, the throughput ratio and the TTFT added by HTTP.
Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import httpx
import torch
from serve import vigil_serve

from vigil.engine.async_engine import AsyncLLMEngine
from vigil.engine.bundled import SMOLLM2, bundled_source
from vigil.engine.llm_engine import EngineConfig, LLMEngine
from vigil.engine.loaders.llm import load_language_model
from vigil.engine.request import (
    GenerationRequest,
    RequestClock,
    RequestId,
    SamplingParams,
    TokenEvent,
)

PASSAGE = (
    "The lighthouse stood on a rock at the mouth of the bay. Every night for forty years "
    "the keeper climbed its steps, trimmed the wick, wound the clock that turned the lens, "
    "and wrote the weather in a leather book. Ships passed, storms came and went, and the "
    "light never failed. Write the next chapter of this story, number {i}."
)


def prompt_text(i: int) -> str:
    return PASSAGE.format(i=i)


def engine_config(concurrency: int) -> EngineConfig:
    # Prefill every prompt in the first step, in both paths alike.
    return EngineConfig(
        max_num_seqs=max(32, concurrency), max_num_batched_tokens=max(2048, 160 * concurrency)
    )


def run_engine(concurrency: int, tokens: int, runs: int) -> list[tuple[float, list[float]]]:
    lm = load_language_model(bundled_source(SMOLLM2), torch.device("cpu"), torch.float32)
    tok = lm.tokenizer
    from vigil.engine.tokenizer import ChatMessage

    prompts = [
        tok.encode(tok.render_chat([ChatMessage("user", prompt_text(i))]))
        for i in range(concurrency)
    ]

    async def main() -> list[tuple[float, list[float]]]:
        engine = AsyncLLMEngine(LLMEngine(lm, engine_config(concurrency)))
        engine.start()
        results = []
        for r in range(runs + 1):  # run 0 warms up

            async def one(i: int, r: int = r) -> tuple[int, float]:
                t0 = time.monotonic()
                params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
                request = GenerationRequest(
                    RequestId(f"b{r}-{i}"), prompts[i], params, clock=RequestClock(t0)
                )
                n, ttft = 0, 0.0
                async for event in engine.generate(request):
                    if isinstance(event, TokenEvent):
                        if n == 0:
                            ttft = time.monotonic() - t0
                        n += 1
                return n, ttft

            t0 = time.monotonic()
            out = await asyncio.gather(*(one(i) for i in range(concurrency)))
            wall = time.monotonic() - t0
            if r:
                results.append((sum(n for n, _ in out) / wall, [t for _, t in out]))
        engine.stop()
        return results

    return asyncio.run(main())


def run_http(
    concurrency: int, tokens: int, runs: int, threads: int
) -> list[tuple[float, list[float]]]:
    cfg = engine_config(concurrency)
    flags = (
        SMOLLM2,
        "--torch-threads",
        str(threads),
        "--max-num-seqs",
        str(cfg.max_num_seqs),
        "--max-num-batched-tokens",
        str(cfg.max_num_batched_tokens),
    )
    with vigil_serve(*flags) as base:

        async def main() -> list[tuple[float, list[float]]]:
            results = []
            async with httpx.AsyncClient(base_url=base, timeout=600) as client:
                for r in range(runs + 1):

                    async def one(i: int) -> tuple[int, float]:
                        body = {
                            "model": SMOLLM2,
                            "stream": True,
                            "temperature": 0,
                            "max_tokens": tokens,
                            "ignore_eos": True,
                            "stream_options": {"include_usage": True},
                            "messages": [{"role": "user", "content": prompt_text(i)}],
                        }
                        t0 = time.monotonic()
                        ttft, n = 0.0, 0
                        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                            async for line in resp.aiter_lines():
                                if not line.startswith("data: {"):
                                    continue
                                chunk = json.loads(line[6:])
                                if chunk.get("usage"):
                                    n = chunk["usage"]["completion_tokens"]
                                elif not ttft and chunk["choices"][0]["delta"].get("content"):
                                    ttft = time.monotonic() - t0
                        return n, ttft

                    t0 = time.monotonic()
                    out = await asyncio.gather(*(one(i) for i in range(concurrency)))
                    wall = time.monotonic() - t0
                    if r:
                        results.append((sum(n for n, _ in out) / wall, [t for _, t in out]))
            return results

        return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"SmolLM2-135M on CPU, {args.threads} thread(s), {args.tokens} output tokens, "
        f"median of {args.runs} runs"
    )
    print(
        f"{'conc':>4}  {'engine tok/s':>12}  {'HTTP tok/s':>10}  {'HTTP/engine':>11}  "
        f"{'engine p50 TTFT ms':>18}  {'HTTP p50 TTFT ms':>16}  {'added ms':>8}"
    )
    for c in (int(x) for x in args.concurrency.split(",")):
        eng = run_engine(c, args.tokens, args.runs)
        http = run_http(c, args.tokens, args.runs, args.threads)
        e_tps = statistics.median(r[0] for r in eng)
        h_tps = statistics.median(r[0] for r in http)
        e_ttft = statistics.median(t for r in eng for t in r[1]) * 1000
        h_ttft = statistics.median(t for r in http for t in r[1]) * 1000
        print(
            f"{c:>4}  {e_tps:>12.1f}  {h_tps:>10.1f}  {h_tps / e_tps:>11.1%}  "
            f"{e_ttft:>18.1f}  {h_ttft:>16.1f}  {h_ttft - e_ttft:>8.1f}"
        )


if __name__ == "__main__":
    main()
