"""Replica choice under skewed request lengths: power of two choices by load against
round robin, on the same workload in one run.

    .venv/bin/python ops/bench/routing_bench.py [--requests 100] [--rates 1.6,2.4] [--seed 7]

Starts `vigil serve --workers 2` (one torch thread each) once per policy and sends it
the same open-loop workloads: Poisson arrivals at each of `--rates` requests/s, a seeded mix
where one request in five is long (a prompt of about 700 tokens and 96 output tokens)
and the rest are short (about 40 prompt tokens, 16 output tokens); every prompt starts
differently, so prefix affinity plays no part. Prints the requests served in full and
shed (429: the default SLO's admission), p50/p99 time to first token (all served
requests and the short ones), output tokens/s over the whole run, p99 TTFT against
round robin's at the same rate, and how the long requests were spread over the two
workers. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import dataclass

import httpx
from serve import vigil_serve

MODEL = "smollm2-135m-instruct"
SENTENCE = (
    "The keeper climbed the steps, trimmed the wick, wound the clock that turned the lens "
    "and wrote the weather in a leather book. "
)


@dataclass(frozen=True)
class Job:
    at: float  # seconds after the start
    long: bool
    prompt: str
    max_tokens: int


@dataclass(frozen=True)
class Outcome:
    job: Job
    ttft: float
    tokens: int
    replica: str
    status: int
    ok: bool  # a 200 with all the tokens asked for


def workload(n: int, rate: float, seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        long = rng.random() < 0.2
        body = SENTENCE * (24 if long else 1)
        jobs.append(Job(t, long, f"Request {rate}-{i}. {body}Go on.", 96 if long else 16))
    return jobs


async def send(client: httpx.AsyncClient, job: Job, t_start: float) -> Outcome:
    await asyncio.sleep(max(0.0, t_start + job.at - time.monotonic()))
    body = {
        "model": MODEL,
        "stream": True,
        "temperature": 0,
        "max_tokens": job.max_tokens,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": job.prompt}],
    }
    t0 = time.monotonic()
    ttft, tokens = 0.0, 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        replica = resp.headers.get("x-vigil-replica", "?")
        if resp.status_code != 200:
            await resp.aread()
            return Outcome(job, 0.0, 0, replica, resp.status_code, False)
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif not ttft and chunk["choices"][0]["delta"].get("content"):
                ttft = time.monotonic() - t0
    return Outcome(job, ttft, tokens, replica, 200, tokens == job.max_tokens)


async def run_workload(base: str, jobs: list[Job]) -> tuple[list[Outcome], float]:
    async with httpx.AsyncClient(base_url=base, timeout=600) as client:
        # One short request per worker first, so neither policy pays for a cold start.
        for i in range(4):
            await send(client, Job(0.0, False, f"Warm-up {i}. {SENTENCE}", 4), time.monotonic())
        t_start = time.monotonic()
        outcomes = await asyncio.gather(*(send(client, j, t_start) for j in jobs))
        return list(outcomes), time.monotonic() - t_start


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--rates", default="1.6,2.4", help="arrivals per second, each a run")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    workloads = {rate: workload(args.requests, rate, args.seed) for rate in rates}
    print(
        f"SmolLM2-135M on CPU, 2 workers x 1 thread, {args.requests} requests per run, "
        f"one in five long (seed {args.seed})"
    )
    rows: dict[tuple[float, str], tuple[list[Outcome], float]] = {}
    for routing in ("round_robin", "p2c"):
        flags = (MODEL, "--routing", routing, "--torch-threads", "1")
        with vigil_serve(*flags, workers=2) as base:
            for rate in rates:
                rows[rate, routing] = asyncio.run(run_workload(base, workloads[rate]))
    print(
        f"{'req/s':>5} {'routing':<12} {'ok':>4} {'429':>4} "
        f"{'p50 TTFT ms':>11} {'p99 TTFT ms':>11} "
        f"{'short p99 ms':>12} {'out tok/s':>9} {'p99 vs rr':>9}  long requests per worker"
    )
    for (rate, routing), (outcomes, wall) in rows.items():
        ok = [o for o in outcomes if o.ok]
        ttfts = [o.ttft for o in ok]
        short = [o.ttft for o in ok if not o.job.long]
        baseline = [o.ttft for o in rows[rate, "round_robin"][0] if o.ok]
        spread = Counter(o.replica for o in ok if o.job.long)
        print(
            f"{rate:>5} {routing:<12} {len(ok):>4} "
            f"{sum(o.status == 429 for o in outcomes):>4} {p(ttfts, 0.5):>11.0f} "
            f"{p(ttfts, 0.99):>11.0f} {p(short, 0.99):>12.0f} "
            f"{sum(o.tokens for o in ok) / wall:>9.1f} "
            f"{p(ttfts, 0.99) / p(baseline, 0.99):>8.2f}x  "
            + ", ".join(f"{k}: {v}" for k, v in sorted(spread.items()))
        )


if __name__ == "__main__":
    main()
