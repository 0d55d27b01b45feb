"""Soak: a long run at about 70% of measured capacity, watching for leaks.

    .venv/bin/python ops/bench/soak.py [--minutes 10] [--share 0.7] [--url URL] [--quick]

Starts `vigil serve` (one worker), or uses the server at `--url`. Then:
1. idle: RSS of the gateway and its worker processes, and the KV cache's free blocks
   (`vigil_kv_cache_free_blocks` on the gateway's /metrics), after a short warm-up;
2. capacity: completed requests/s with `--clients` requests always in flight, for
   `--probe-s` seconds;
3. soak: Poisson arrivals at `--share` of that rate for `--minutes`: completions with
   prompts that all differ, half of them streamed, one in ten streamed and dropped after
   its first tokens (the abort path), sampling RSS and free blocks every `--sample-s`;
4. idle again: once nothing runs or waits, the same readings as in 1.
Prints each process's RSS at start and end, the free blocks at idle before and after,
the RSS slope over the soak (least squares, MB/min, the first fifth left out as
warm-up) and a verdict: flat when every slope is under `--max-slope` MB/min and the
free blocks came back. Note the machine's load: other work skews everything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx

MODEL = "smollm2-135m-instruct"
WORDS = ["keeper", "light", "storm", "ship", "rock", "lens", "wick", "clock", "bay", "tide"]


@dataclass(frozen=True)
class Sample:
    t_s: float  # since the soak began
    rss_mb: dict[str, float]  # process -> resident MB
    free_blocks: int
    in_flight: int


@dataclass
class Soak:
    url: str
    pids: dict[str, int]  # "gateway", "worker-N" -> pid
    tokens: int
    samples: list[Sample] = field(default_factory=list)
    served: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def processes(port: int) -> dict[str, int]:
    """The `vigil serve` listening on `port` and its worker processes, by /proc."""
    gateway = None
    table: list[tuple[int, int, list[str]]] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().decode().split("\0")
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        table.append((int(proc.name), ppid, args))
        if "serve" in args and "--port" in args and args[args.index("--port") + 1] == str(port):
            gateway = int(proc.name)
    assert gateway is not None, f"no `vigil serve --port {port}` on this machine"
    module = "vigil.platform.worker.local"  # how `vigil serve` starts its workers
    workers = sorted(pid for pid, ppid, args in table if ppid == gateway and module in args)
    return {"gateway": gateway, **{f"worker-{i}": pid for i, pid in enumerate(workers)}}


def free_blocks(url: str) -> tuple[int, int]:
    """(free KV blocks, requests running or waiting), summed over every engine."""
    free = busy = 0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("vigil_kv_cache_free_blocks{"):
            free += int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith(("vigil_requests_running{", "vigil_requests_waiting{")):
            busy += int(float(line.rsplit(" ", 1)[1]))
    return free, busy


async def one_request(soak: Soak, client: httpx.AsyncClient, rng: random.Random) -> None:
    prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 60)))
    streamed, dropped = rng.random() < 0.5, rng.random() < 0.1
    body = {"model": MODEL, "prompt": prompt, "max_tokens": soak.tokens, "ignore_eos": True}
    soak.in_flight += 1
    try:
        if streamed or dropped:
            async with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
                status = r.status_code
                async for line in r.aiter_lines():
                    if dropped and line.startswith("data: {"):
                        break  # the client goes away: aborted on the worker
        else:
            status = (await client.post("/v1/completions", json=body)).status_code
    except httpx.HTTPError as exc:
        status, name = 0, type(exc).__name__
        soak.failed[name] = soak.failed.get(name, 0) + 1
    finally:
        soak.in_flight -= 1
    if status == 200:
        soak.served += 1
    elif status:
        soak.failed[str(status)] = soak.failed.get(str(status), 0) + 1


async def capacity(soak: Soak, clients: int, probe_s: float) -> float:
    """Requests/s completed with `clients` always in flight."""
    rng = random.Random(1)
    async with httpx.AsyncClient(base_url=soak.url, timeout=120) as client:
        start, done = time.monotonic(), soak.served

        async def loop() -> None:
            while time.monotonic() - start < probe_s:
                await one_request(soak, client, rng)

        await asyncio.gather(*(loop() for _ in range(clients)))
        return (soak.served - done) / (time.monotonic() - start)


async def soak_at(soak: Soak, rate: float, minutes: float, sample_s: float) -> None:
    """Poisson arrivals at `rate`/s for `minutes`, sampling as it goes."""
    rng = random.Random(2)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=soak.url, timeout=300, limits=limits) as client:
        start = time.monotonic()
        end, next_sample = start + minutes * 60, start
        tasks: set[asyncio.Task[None]] = set()
        while (now := time.monotonic()) < end:
            if now >= next_sample:
                soak.samples.append(await asyncio.to_thread(sample, soak, now - start))
                next_sample += sample_s
            task = asyncio.create_task(one_request(soak, client, rng))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(rng.expovariate(rate))
        await asyncio.gather(*tasks)


def sample(soak: Soak, t_s: float) -> Sample:
    free, _ = free_blocks(soak.url)
    rss = {name: rss_mb(pid) for name, pid in soak.pids.items()}
    return Sample(t_s, rss, free, soak.in_flight)


def idle(soak: Soak, settle_s: float) -> Sample:
    """Readings once nothing runs or waits anywhere, after `settle_s` more."""
    deadline = time.monotonic() + 120
    while free_blocks(soak.url)[1] > 0:
        assert time.monotonic() < deadline, "the engines did not go idle in 120 s"
        time.sleep(0.5)
    time.sleep(settle_s)
    return sample(soak, 0.0)


def slope_mb_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB), in MB per minute; 0 for fewer than 2."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (y - mean_y) for t, y in points)
    return cov / var * 60


def report(
    soak: Soak, before: Sample, after: Sample, rate: float, max_slope: float, minutes: float
) -> bool:
    steady = [s for s in soak.samples if s.t_s >= minutes * 60 / 5]
    print(f"\nload: {os.getloadavg()[0]:.1f} (1-min load average at the end)")
    print(f"served {soak.served}, failed {soak.failed or 0}, at {rate:.2f} req/s offered\n")
    print(f"{'process':<10} {'idle start MB':>14} {'idle end MB':>12} {'slope MB/min':>13}")
    flat = True
    for name in soak.pids:
        slope = slope_mb_per_min([(s.t_s, s.rss_mb[name]) for s in steady])
        flat &= abs(slope) < max_slope
        print(f"{name:<10} {before.rss_mb[name]:>14.1f} {after.rss_mb[name]:>12.1f} {slope:>13.2f}")
    print(f"\nKV free blocks at idle: before {before.free_blocks}, after {after.free_blocks}")
    low = min((s.free_blocks for s in soak.samples), default=before.free_blocks)
    print(f"KV free blocks, lowest while loaded: {low}")
    flat &= after.free_blocks == before.free_blocks
    verdict = "flat: no growth trend" if flat else "GROWTH or KV blocks not returned"
    print(f"verdict: {verdict} (slope limit {max_slope} MB/min)")
    return flat


@contextlib.contextmanager
def server(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    from serve import vigil_serve  # ops/bench/serve.py, next to this file

    with vigil_serve("--max-num-seqs", "16") as base:
        yield base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--share", type=float, default=0.7, help="of the measured capacity")
    parser.add_argument("--clients", type=int, default=8, help="in flight while probing")
    parser.add_argument("--probe-s", type=float, default=30.0)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=32, help="output tokens a request")
    parser.add_argument("--max-slope", type=float, default=2.0, help="MB/min called flat")
    parser.add_argument("--url", help="a running `vigil serve` (its workers are found)")
    parser.add_argument("--quick", action="store_true", help="a smoke run of seconds")
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.probe_s, args.sample_s, args.tokens = 0.1, 3.0, 1.0, 4
    ok = run(args)
    raise SystemExit(0 if ok else 1)


def run(args: argparse.Namespace) -> bool:
    with server(args.url) as url:
        port = urlparse(url).port
        assert port is not None, url
        soak = Soak(url, processes(port), args.tokens)
        asyncio.run(capacity(soak, 2, 1.0 if args.quick else 5.0))  # warm-up
        before = idle(soak, 2.0)
        rate = asyncio.run(capacity(soak, args.clients, args.probe_s))
        print(f"capacity: {rate:.2f} req/s with {args.clients} in flight")
        asyncio.run(soak_at(soak, args.share * rate, args.minutes, args.sample_s))
        after = idle(soak, 2.0)
        return report(soak, before, after, args.share * rate, args.max_slope, args.minutes)


if __name__ == "__main__":
    main()
