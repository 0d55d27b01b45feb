"""The capacity planner against a measured run: what `vigil plan` predicts for one worker,
then the same load sent for real.

    .venv/bin/python ops/bench/plan_check.py [--loads 0.5,0.9] [--duration-s 60]
        [--prompt-tokens 64] [--output-tokens 16] [--ttft-p99 5] [--min-tokens-per-s 1]

Starts `vigil serve` with the bundled chat model and one worker (one torch thread), warms
it with closed-loop rounds at concurrency 1, 2, 4, 8 and 16 (so that the worker measures
its prefill rate and decode step time at those batch sizes), then asks POST
/api/admin/plan for the most requests/s one worker sustains within the SLO given (the
served deployment's own is set out of reach, so that admission sheds nothing). For
each share of that rate in `--loads` it asks for the prediction at that rate and sends
the load: Poisson arrivals (seeded) for `--duration-s`, streaming, ignore_eos so that
each request gives exactly `--output-tokens`, every prompt different (no prefix-cache
hits, as the planner assumes). Prints predicted against measured TTFT p50/p99 and
per-stream tokens/s (p50, and the 1st percentile: what 99% of streams reach), with the
ratio measured / predicted; the first and last tenth of each run's requests are not
counted (the planner's simulation skips them too). Run it on an idle machine.

`--quick` runs a short version of each part (the smoke test's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from serve import vigil_serve

from vigil.platform.planning.command import table

MODEL = "chat"
# The deployment's own SLO is set far off, so that admission never sheds the warm-up
# rounds or the loads: the planner does not model shedding. The plan's SLO is sent.
DEPLOYMENTS = """
[[deployments]]
name = "chat"
model = "smollm2-135m-instruct"
slo = { ttft_p99_s = 3600.0, min_tokens_per_s = 0.001, auto_rollback = false }
"""
USER, PASSWORD = "planner", "plan-check password"
MEASURED_WITHIN_S = 30.0  # from the last warm-up response to the rates at the gateway
WORDS = [
    "harbour",
    "lantern",
    "copper",
    "meadow",
    "violet",
    "engine",
    "quarry",
    "saddle",
    "ribbon",
    "glacier",
    "thunder",
    "orchard",
    "pepper",
    "canyon",
    "marble",
    "velvet",
    "falcon",
    "compass",
    "willow",
    "ember",
]


@dataclass(frozen=True)
class Result:
    status: int
    ttft_s: float
    tokens: int
    decode_s: float  # first token to last


def prompt_text(i: int, num_words: int, rng: random.Random) -> str:
    """Different from the first word on, so no two prompts share a cached block."""
    return f"{i} " + " ".join(rng.choice(WORDS) for _ in range(num_words))


async def send(client: httpx.AsyncClient, prompt: str, max_tokens: int) -> Result:
    body = {
        "model": MODEL,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    t0 = time.monotonic()
    first = last = 0.0
    tokens = 0
    async with client.stream("POST", "/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            await resp.aread()
            return Result(resp.status_code, 0.0, 0, 0.0)
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            if not json.loads(line[6:])["choices"][0].get("text"):
                continue
            last = time.monotonic()
            first = first or last
            tokens += 1
    return Result(200, first - t0, tokens, last - first)


async def prompt_tokens(client: httpx.AsyncClient, prompt: str) -> int:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1}
    resp = await client.post("/v1/completions", json=body)
    resp.raise_for_status()
    return int(resp.json()["usage"]["prompt_tokens"])


async def warm(
    client: httpx.AsyncClient, words: int, output: int, rounds: int, concurrencies: list[int]
) -> None:
    rng = random.Random(1)
    n = 0
    for concurrency in concurrencies:
        for _ in range(rounds):
            prompts = [prompt_text(10_000 + n + k, words, rng) for k in range(concurrency)]
            n += concurrency
            await asyncio.gather(*(send(client, p, output) for p in prompts))


async def open_loop(
    client: httpx.AsyncClient, rps: float, duration_s: float, words: int, output: int, seed: int
) -> list[Result]:
    rng = random.Random(seed)
    start, at, tasks, i = time.monotonic(), 0.0, [], 0
    while True:
        at += rng.expovariate(rps)
        if at > duration_s:
            break
        await asyncio.sleep(max(0.0, start + at - time.monotonic()))
        prompt = prompt_text(seed * 100_000 + i, words, rng)
        tasks.append(asyncio.create_task(send(client, prompt, output)))
        i += 1
    return list(await asyncio.gather(*tasks))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


async def plan(client: httpx.AsyncClient, body: dict[str, object]) -> dict[str, object]:
    """Asked again while the worker's rates have not reached the gateway: they come with
    its heartbeat (each second, later when a busy machine delays it), not with the
    responses that measured them."""
    deadline = time.monotonic() + MEASURED_WITHIN_S
    while True:
        resp = await client.post("/api/admin/plan", json=body, auth=(USER, PASSWORD))
        if resp.status_code == 200:
            return dict(resp.json())
        measuring = resp.status_code == 409 and "not_measured" in resp.text
        if not measuring or time.monotonic() > deadline:
            raise SystemExit(f"plan: {resp.status_code} {resp.text}")
        await asyncio.sleep(0.5)


def make_user(data_dir: Path) -> None:
    vigil = Path(sys.executable).with_name("vigil")
    cmd = [str(vigil), "admin", "create", "--username", USER, "--role", "viewer"]
    cmd += ["--password-stdin", "--data-dir", str(data_dir)]
    subprocess.run(cmd, input=PASSWORD + "\n", text=True, check=True, capture_output=True)


async def check(base: str, args: argparse.Namespace) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=600) as client:
        words = args.prompt_tokens  # about one token each, measured below
        num_prompt = await prompt_tokens(client, prompt_text(0, words, random.Random(0)))
        await warm(client, words, args.output_tokens, args.warm_rounds, args.concurrencies)
        body: dict[str, object] = {
            "deployment": MODEL,
            "prompt_tokens": num_prompt,
            "output_tokens": args.output_tokens,
            "ttft_p99_s": args.ttft_p99,
            "min_tokens_per_s": args.min_tokens_per_s,
        }
        first = await plan(client, {**body, "rps": 1.0})
        max_rps = float(first["max_rps_per_worker"])  # type: ignore[arg-type]
        print(f"measured rates: {json.dumps(first['rates'])}")
        print(table(first))  # as `vigil plan` prints it, for 1 request/s
        if max_rps == 0:
            print(f"no load meets this SLO on this worker: {first['binding_why']}")
            return
        slo = first["slo"]
        assert isinstance(slo, dict)
        print(
            f"prompt {num_prompt} tokens, output {args.output_tokens} tokens; SLO TTFT p99 <= "
            f"{slo['ttft_p99_s']} s, >= {slo['min_tokens_per_s']} tokens/s per stream; "
            f"planner's max for one worker: {max_rps:.3f} requests/s (binding: "
            f"{first['binding']})"
        )
        header = (
            f"{'load':>5} {'req/s':>6} {'n':>4} {'429':>4} | {'TTFT p50 s':^20} | "
            f"{'TTFT p99 s':^20} | {'tok/s p50':^20} | {'tok/s p1':^20}"
        )
        print(header)
        print(f"{'':>22} |" + " pred   meas  ratio |" * 4)
        for share in args.loads:
            rps = share * max_rps
            pred = (await plan(client, {**body, "rps": rps}))["predicted"]
            assert isinstance(pred, dict)
            # A quick run still sends a few requests, however slow the machine.
            duration_s = min(60.0, max(args.duration_s, 6 / rps)) if args.quick else args.duration_s
            results = await open_loop(
                client, rps, duration_s, words, args.output_tokens, seed=int(share * 100)
            )
            print(row(share, rps, pred, results))


def row(share: float, rps: float, pred: dict[str, float], results: list[Result]) -> str:
    cut = len(results) // 10
    kept = results[cut : len(results) - cut]
    ok = [r for r in kept if r.status == 200 and r.tokens >= 2]
    ttft = [r.ttft_s for r in ok]
    tps = [(r.tokens - 1) / r.decode_s for r in ok if r.decode_s > 0]
    pairs = [
        (pred["ttft_p50_s"], percentile(ttft, 0.5)),
        (pred["ttft_p99_s"], percentile(ttft, 0.99)),
        (pred["stream_tokens_per_s_p50"], percentile(tps, 0.5)),
        (pred["stream_tokens_per_s_p1"], percentile(tps, 0.01)),
    ]
    shed = sum(1 for r in kept if r.status == 429)
    cells = " |".join(f" {p or 0:5.2f} {m:6.2f} {m / p if p else 0:5.2f}" for p, m in pairs)
    return f"{share:>5.2f} {rps:>6.3g} {len(ok):>4} {shed:>4} |{cells} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default="0.5,0.9", help="shares of the planned max rate")
    parser.add_argument("--duration-s", type=float, default=60.0, help="of each load")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--ttft-p99", type=float, default=5.0, help="the SLO planned for, s")
    parser.add_argument("--min-tokens-per-s", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="a short run of every part")
    args = parser.parse_args()
    args.loads = [float(x) for x in args.loads.split(",")]
    args.warm_rounds, args.concurrencies = 2, [1, 2, 4, 8, 16]
    if args.quick:  # every part, briefly, with an SLO a busy machine meets
        args.loads, args.duration_s = args.loads[:1], min(args.duration_s, 4.0)
        args.warm_rounds, args.concurrencies = 1, [1, 2]
        args.prompt_tokens, args.output_tokens = 16, 4
        args.ttft_p99, args.min_tokens_per_s = 10.0, 0.1
    data_dir = Path(tempfile.mkdtemp(prefix="vigil-plan-check-"))
    make_user(data_dir)
    config = data_dir / "deployments.toml"
    config.write_text(DEPLOYMENTS)
    flags = ("smollm2-135m-instruct", "--config", str(config), "--torch-threads", "1")
    with vigil_serve(*flags, workers=1, data_dir=data_dir, timeout_s=900) as base:
        asyncio.run(check(base, args))


if __name__ == "__main__":
    main()
