"""Engine benchmarks: one command, one table per question, every ratio measured in this run.

    .venv/bin/python ops/bench/engine_bench.py [--only throughput,prefix,embed,overhead,kv]
                                               [--concurrency 1,4,16,32] [--threads 1]

1. throughput  output tokens/s at each concurrency (prompt 128 tokens, 64 output tokens,
               greedy, EOS ignored) for Vigil's continuous batching, against naive
               one-request-at-a-time through the same runtime and transformers' `generate`
               on a static batch of the same size. Also the decode-only rate (first to last
               token), which isolates what batching changes: prefill is compute-bound and
               costs the same FLOPs batched or not.
2. prefix      TTFT of requests sharing a 1,024-token system prompt (each with its own
               32-token question), prefix cache on vs off.
3. embed       requests/s of 32 concurrent single-sentence clients through the dynamic
               batcher vs a batcher of size 1, and the offline throughput of batch 32;
               p99 of the batching wait against max_wait_ms.
4. overhead    share of step time outside the model forward, decoding at batch 16.
5. kv          KV bytes per token (measured against 2 x layers x kv_heads x head_dim x
               dtype size) and how many 1,024-token sequences a budget holds.

Run it on an idle machine: the numbers are only comparable within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from vigil.engine.async_engine import AsyncLLMEngine
from vigil.engine.bundled import MINILM, SMOLLM2, bundled_source
from vigil.engine.embed_batcher import AsyncEmbedder, BatcherConfig
from vigil.engine.kv_cache import blocks_needed
from vigil.engine.llm_engine import EngineConfig, LLMEngine
from vigil.engine.loaders.embedder import EmbeddingModel, load_embedding_model
from vigil.engine.loaders.llm import LanguageModel, load_language_model
from vigil.engine.request import (
    GenerationRequest,
    RequestClock,
    RequestId,
    SamplingParams,
    TokenEvent,
)
from vigil.engine.runner import kv_bytes_per_token
from vigil.engine.stats import BatchRecord

PROMPT_TOKENS = 128
OUTPUT_TOKENS = 64
VOCAB_LOW, VOCAB_HIGH = 100, 40_000  # ordinary tokens, no control tokens


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def random_prompts(n: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(VOCAB_LOW, VOCAB_HIGH) for _ in range(length)] for _ in range(n)]


@dataclass(frozen=True, slots=True)
class RunResult:
    tokens_per_s: float  # all output tokens / wall time
    decode_tokens_per_s: float  # output tokens after each first / time from first to last
    ttfts_s: list[float]


def run_engine(
    lm: LanguageModel,
    prompts: list[list[int]],
    max_tokens: int,
    config: EngineConfig,
    sequential: bool = False,
) -> RunResult:
    async def main() -> RunResult:
        engine = AsyncLLMEngine(LLMEngine(lm, config))
        engine.start()
        warm = GenerationRequest(RequestId("warm-up"), prompts[0][:8], SamplingParams(2, 0.0))
        _ = [e async for e in engine.generate(warm)]  # first-call costs stay out of the timing
        stamps: dict[int, list[float]] = {}
        starts: dict[int, float] = {}

        async def one(i: int, prompt: list[int]) -> None:
            starts[i] = time.monotonic()
            params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
            request = GenerationRequest(
                RequestId(f"bench-{i}"), prompt, params, clock=RequestClock(starts[i])
            )
            stamps[i] = [
                e.token_ts async for e in engine.generate(request) if isinstance(e, TokenEvent)
            ]

        t0 = time.monotonic()
        if sequential:
            for i, p in enumerate(prompts):
                await one(i, p)
        else:
            await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        wall = time.monotonic() - t0
        engine.stop()
        total = sum(len(s) for s in stamps.values())
        first = min(s[0] for s in stamps.values())
        last = max(s[-1] for s in stamps.values())
        ttfts = [stamps[i][0] - starts[i] for i in stamps]
        # sequential: each request's decode time, summed
        decode_s = sum(s[-1] - s[0] for s in stamps.values()) if sequential else last - first
        decode_rate = (total - len(stamps)) / decode_s if decode_s > 0 else float("nan")
        return RunResult(total / wall, decode_rate, ttfts)

    return asyncio.run(main())


def run_transformers(
    hf_model: torch.nn.Module, prompts: list[list[int]], max_tokens: int
) -> RunResult:
    ids = torch.tensor(prompts)
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        hf_model.generate(input_ids=ids[:1, :8], max_new_tokens=2, do_sample=False)  # warm-up
        t0 = time.monotonic()
        # The prefill alone, to split the decode rate out as for the engine.
        hf_model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=1, min_new_tokens=1, do_sample=False
        )
        t1 = time.monotonic()
        out = hf_model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_tokens,
            min_new_tokens=max_tokens,
            do_sample=False,
        )
        t2 = time.monotonic()
    total = (out.shape[1] - ids.shape[1]) * ids.shape[0]
    prefill_s = t1 - t0
    decode_s = (t2 - t1) - prefill_s
    return RunResult(total / (t2 - t1), (total - ids.shape[0]) / decode_s, [prefill_s])


def bench_throughput(lm: LanguageModel, concurrencies: list[int]) -> None:
    from transformers import AutoModelForCausalLM

    source = bundled_source(SMOLLM2)
    hf = AutoModelForCausalLM.from_pretrained(
        source.path.parent, gguf_file=source.path.name, dtype=torch.float32
    ).eval()
    # A token budget that prefills every prompt in the first step, as the static batch does.
    budget = max(2048, max(concurrencies) * PROMPT_TOKENS)
    config = EngineConfig(
        max_num_seqs=max(concurrencies), max_num_batched_tokens=budget, enable_prefix_caching=False
    )
    naive_prompts = random_prompts(4, PROMPT_TOKENS, seed=1)
    naive = run_engine(lm, naive_prompts, OUTPUT_TOKENS, config, sequential=True)
    rows = []
    for c in concurrencies:
        prompts = random_prompts(c, PROMPT_TOKENS, seed=c)
        ours = run_engine(lm, prompts, OUTPUT_TOKENS, config)
        theirs = run_transformers(hf, prompts, OUTPUT_TOKENS)
        rows.append(
            [
                str(c),
                f"{ours.tokens_per_s:.1f}",
                f"{naive.tokens_per_s:.1f}",
                f"{theirs.tokens_per_s:.1f}",
                f"{ours.tokens_per_s / naive.tokens_per_s:.2f}x",
                f"{ours.tokens_per_s / theirs.tokens_per_s:.2f}x",
                f"{ours.decode_tokens_per_s:.1f}",
                f"{naive.decode_tokens_per_s:.1f}",
                f"{theirs.decode_tokens_per_s:.1f}",
                f"{ours.decode_tokens_per_s / naive.decode_tokens_per_s:.2f}x",
            ]
        )
    table(
        f"1. Output tokens/s, prompt {PROMPT_TOKENS}, output {OUTPUT_TOKENS}, greedy "
        "(naive: one request at a time through our runtime; HF: transformers generate, "
        "static batch)",
        [
            "conc",
            "vigil",
            "naive",
            "HF static",
            "vs naive",
            "vs HF",
            "decode vigil",
            "decode naive",
            "decode HF",
            "decode vs naive",
        ],
        rows,
    )


def bench_prefix(lm: LanguageModel, n: int = 4) -> None:
    rng = random.Random(7)
    system = [rng.randrange(VOCAB_LOW, VOCAB_HIGH) for _ in range(1024)]
    questions = random_prompts(n + 1, 32, seed=8)
    rows = []
    results = {}
    for cached in (False, True):
        config = EngineConfig(enable_prefix_caching=cached)
        # First request warms the cache (when on); the next n are measured one by one.
        run = run_engine(lm, [system + q for q in questions], 1, config, sequential=True)
        results[cached] = statistics.median(run.ttfts_s[1:])
    rows.append(
        [
            f"{results[False] * 1000:.0f}",
            f"{results[True] * 1000:.0f}",
            f"{results[False] / results[True]:.1f}x",
        ]
    )
    table(
        f"2. TTFT with a shared 1,024-token system prompt + 32-token question (median of {n})",
        ["cache off ms", "cache on ms", "speed-up"],
        rows,
    )


def bench_embed(model: EmbeddingModel, clients: int = 32, per_client: int = 8) -> None:
    sentences = [f"Sentence number {i} is about the weather in town {i % 7}." for i in range(64)]
    rows = model.tokenize(sentences)  # as the gateway sends them: token ids

    def closed_loop(config: BatcherConfig) -> tuple[float, list[float]]:
        waits: list[float] = []

        def observe(batch: BatchRecord) -> None:
            waits.extend(batch.waits_s)

        async def main() -> float:
            embedder = AsyncEmbedder(model, config, observe)
            embedder.start()

            async def client(k: int) -> None:
                for j in range(per_client):
                    await embedder.embed_ids([rows[(k * per_client + j) % len(rows)]])

            t0 = time.monotonic()
            await asyncio.gather(*(client(k) for k in range(clients)))
            wall = time.monotonic() - t0
            embedder.stop()
            return clients * per_client / wall

        return asyncio.run(main()), waits

    batched_rps, waits = closed_loop(BatcherConfig(max_batch_size=32, max_wait_ms=5.0))
    single_rps, _ = closed_loop(BatcherConfig(max_batch_size=1, max_wait_ms=0.0))
    batch = sentences[:32]
    model.embed(batch)
    t0 = time.monotonic()
    repeats = 8
    for _ in range(repeats):
        model.embed(batch)
    offline_rps = 32 * repeats / (time.monotonic() - t0)
    p99_wait_ms = statistics.quantiles(waits, n=100)[98] * 1000
    table(
        f"3. Embeddings, {clients} concurrent single-sentence clients",
        [
            "batcher req/s",
            "batch-1 req/s",
            "offline b32 req/s",
            "vs batch-1",
            "vs offline",
            "p99 wait ms",
            "max_wait_ms",
        ],
        [
            [
                f"{batched_rps:.0f}",
                f"{single_rps:.0f}",
                f"{offline_rps:.0f}",
                f"{batched_rps / single_rps:.2f}x",
                f"{batched_rps / offline_rps:.0%}",
                f"{p99_wait_ms:.2f}",
                "5.0",
            ]
        ],
    )


def bench_overhead(lm: LanguageModel, batch: int = 16, steps: int = 30) -> None:
    engine = LLMEngine(lm, EngineConfig(enable_prefix_caching=False))
    for i, prompt in enumerate(random_prompts(batch, PROMPT_TOKENS, seed=3)):
        params = SamplingParams(max_tokens=steps + 8, temperature=0.0, ignore_eos=True)
        engine.add_request(
            GenerationRequest(
                RequestId(f"o{i}"), prompt, params, clock=RequestClock(time.monotonic())
            )
        )
    while True:  # prefill until everyone decodes
        engine.step()
        last = engine.stats().last_step
        if last is not None and last.num_decodes == batch:
            break
    samples = []
    for _ in range(steps):
        t0 = time.perf_counter()
        engine.step()
        wall = time.perf_counter() - t0
        s = engine.stats().last_step
        assert s is not None
        samples.append((wall, s))
    wall = statistics.median(w for w, _ in samples)

    def med(f: Callable[[object], float]) -> float:
        return statistics.median(f(s) for _, s in samples)

    forward = med(lambda s: s.forward_s)  # type: ignore[attr-defined]
    rows = [
        [
            f"{wall * 1000:.1f}",
            f"{forward * 1000:.1f}",
            f"{med(lambda s: s.schedule_s) * 1000:.2f}",  # type: ignore[attr-defined]
            f"{med(lambda s: s.prepare_s) * 1000:.2f}",  # type: ignore[attr-defined]
            f"{med(lambda s: s.sample_s) * 1000:.2f}",  # type: ignore[attr-defined]
            f"{med(lambda s: s.output_s) * 1000:.2f}",  # type: ignore[attr-defined]
            f"{(wall - forward) / wall:.1%}",
        ]
    ]
    table(
        f"4. Decode step at batch {batch} (median of {steps} steps, ms)",
        ["step", "forward", "schedule", "prepare", "sample", "outputs", "outside forward"],
        rows,
    )


def bench_kv(lm: LanguageModel, budget_bytes: int = 1 << 30) -> None:
    cfg = lm.config
    itemsize = torch.empty((), dtype=lm.dtype).element_size()
    formula = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * itemsize
    engine = LLMEngine(lm, EngineConfig(kv_cache_memory_bytes=budget_bytes))
    kv = engine.runner.kv_caches
    measured = kv.numel() * kv.element_size() // engine.kv_capacity_tokens
    per_seq = blocks_needed(1024, engine.config.block_size)
    table(
        "5. KV cache memory",
        ["bytes/token measured", "2*L*KVH*D*size", "budget", "blocks", "1,024-token seqs"],
        [
            [
                str(measured),
                str(formula),
                f"{budget_bytes / 2**30:.2f} GiB",
                str(engine.pool.num_blocks),
                str(engine.pool.num_blocks // per_seq),
            ]
        ],
    )
    assert measured == formula == kv_bytes_per_token(lm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="throughput,prefix,embed,overhead,kv")
    parser.add_argument("--concurrency", default="1,4,16,32")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    parts = set(args.only.split(","))
    cpu = torch.device("cpu")
    print(f"torch {torch.__version__}, {args.threads} thread(s), float32 on CPU")
    lm = load_language_model(bundled_source(SMOLLM2), cpu, torch.float32)
    if "throughput" in parts:
        bench_throughput(lm, [int(c) for c in args.concurrency.split(",")])
    if "prefix" in parts:
        bench_prefix(lm)
    if "embed" in parts:
        bench_embed(load_embedding_model(bundled_source(MINILM), cpu, torch.float32))
    if "overhead" in parts:
        bench_overhead(lm)
    if "kv" in parts:
        bench_kv(lm)


if __name__ == "__main__":
    main()
