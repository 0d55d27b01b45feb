"""What tracing costs: the same closed-loop load on `vigil serve` with tracing off
(`--trace-buffer 0`) and on as it is by default (the ring of the last 256 traces, every
request traced: sample ratio 1.0), and optionally exported over OTLP/HTTP to a receiver
on 127.0.0.1 (`--otlp`), with how long a span takes to reach it.

    .venv/bin/python ops/bench/tracing_bench.py [--concurrency 16] [--requests 96]
        [--max-tokens 32] [--rounds 3] [--otlp]

Every configuration runs as its own server, all started before the load and loaded in
turn, round after round, so that a slower minute of a shared machine falls on each
alike; each figure is the median of the rounds. Streaming chat requests with EOS
ignored, so every request decodes --max-tokens tokens. Prints output tokens/s and p50/p99
time to first token for each, and their ratios to tracing off. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from serve import vigil_serve

MODEL = "smollm2-135m-instruct"
# A target no closed loop of 16 misses on 2 cores: the bench measures tracing, not shedding.
CONFIG = f"""
[[deployments]]
name = "{MODEL}"
model = "{MODEL}"
slo = {{ ttft_p99_s = 600, min_tokens_per_s = 0.01 }}
"""


class Receiver:
    """OTLP/HTTP: records, per server span, the delay from its end to its arrival."""

    def __init__(self) -> None:
        self.delays_s: list[float] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                now_ns = time.time_ns()
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            if span.kind == 2:  # SERVER
                                receiver.delays_s.append((now_ns - span.end_time_unix_nano) / 1e9)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


async def _load(url: str, concurrency: int, requests: int, max_tokens: int) -> dict[str, float]:
    ttfts: list[float] = []
    tokens = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal tokens
        while not queue.empty():
            i = queue.get_nowait()
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": f"Story {i}: tell me about the sea."}],
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "stream": True,
            }
            t0 = time.perf_counter()
            first = None
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200, await r.aread()
                async for line in r.aiter_lines():
                    if line.startswith("data: {") and first is None and '"content"' in line:
                        first = time.perf_counter() - t0
            ttfts.append(first or 0.0)
            tokens += max_tokens

    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    q = statistics.quantiles(ttfts, n=100, method="inclusive")
    return {"tokens_per_s": tokens / elapsed, "ttft_p50": q[49], "ttft_p99": q[98]}


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--otlp", action="store_true", help="also: the ring and OTLP export")
    args = parser.parse_args()
    receiver = Receiver()
    config = Path(tempfile.mkdtemp()) / "vigil.toml"
    config.write_text(CONFIG)
    runs = {
        "off (--trace-buffer 0)": ["--trace-buffer", "0"],
        "on: ring of 256 (default)": [],
    }
    if args.otlp:
        runs["on: ring + OTLP/HTTP"] = ["--otlp-endpoint", receiver.url]
    common = ["--config", str(config), "--torch-threads", "1", "--log-level", "warning"]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    with contextlib.ExitStack() as stack:
        urls = {
            name: stack.enter_context(vigil_serve(*flags, *common)) for name, flags in runs.items()
        }
        for url in urls.values():  # warm-up: first compiles, first steps
            asyncio.run(_load(url, args.concurrency, max(args.concurrency, 8), 4))
        receiver.delays_s.clear()
        for _ in range(args.rounds):
            for name, url in urls.items():
                load = _load(url, args.concurrency, args.requests, args.max_tokens)
                results[name].append(asyncio.run(load))
        time.sleep(2.5)  # the last batch of spans
    medians = {name: _median(r) for name, r in results.items()}
    base = next(iter(medians.values()))
    print(
        f"\n## Tracing at concurrency {args.concurrency}, {args.requests} streamed chat "
        f"requests of {args.max_tokens} tokens, median of {args.rounds} rounds\n"
    )
    print("| tracing | output tok/s | vs off | TTFT p50 (ms) | TTFT p99 (ms) | p99 vs off |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in medians.items():
        print(
            f"| {name} | {r['tokens_per_s']:.1f} | "
            f"{r['tokens_per_s'] / base['tokens_per_s']:.3f} | "
            f"{r['ttft_p50'] * 1e3:.0f} | {r['ttft_p99'] * 1e3:.0f} | "
            f"{r['ttft_p99'] / base['ttft_p99']:.3f} |"
        )
    d = receiver.delays_s
    if d:
        q = statistics.quantiles(d, n=100, method="inclusive")
        print(
            f"\nSpan export latency (server span's end to arrival), {len(d)} spans: "
            f"p50 {q[49] * 1e3:.0f} ms, p99 {q[98] * 1e3:.0f} ms"
        )


if __name__ == "__main__":
    main()
