"""Vigil against llama.cpp's `llama-server` on the same GGUF, the same CPU and the same
workload, measured in one run.

    .venv/bin/python ops/bench/peer_bench.py [--llama-server PATH] [--repeats 3] [--quick]
                                             [--vigil-args "--torch-threads 2" ...]

Each server is started in turn (llama-server first, then `vigil serve`) on the bundled
SmolLM2-135M-Instruct GGUF, and gets the same closed loop of streaming `/v1/completions`:
C clients, each sending its next request as soon as the last one ends (132-token prompts
of random ordinary tokens, unique per request so that no prefix cache helps, 64 output
tokens, greedy, EOS ignored) at C = 1, 4, 16; then, at C = 1, requests sharing a
120-token prefix (the first one warms the cache and is not counted). Every figure is
measured `--repeats` times; the table gives the median and, in brackets, the range.
Resident memory is read from /proc after the run: llama-server's one process, Vigil's
gateway and its worker process(es) separately. `--vigil-args` may be given more than
once: each set of flags is a Vigil run of its own, a column of its own ("vigil" then
the flags), each with its ratio to llama-server.

llama-server is found through `--llama-server`, else $LLAMA_SERVER, else the PATH. To
build it (CPU only, offline from the llama.cpp tree vendored in the llama-cpp-python
sdist on PyPI, about 10 minutes on 2 cores):

    WORK=/tmp/llama bash ../shared/bench/build_llama_server.sh
    # -> /tmp/llama/llama.cpp/build/bin/llama-server

Run it on an idle machine: absolute figures move with anything else running; the ratios
within one run are what compare.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from serve import free_port, vigil_serve_process

from vigil.engine.bundled import SMOLLM2, bundled_source

PROMPT_TOKENS = 132
OUTPUT_TOKENS = 64
PREFIX_TOKENS = 120
VOCAB_LOW, VOCAB_HIGH = 100, 40_000  # ordinary tokens, no control tokens
LLAMA_ALIAS = "smollm2"
# llama-server queues whatever comes; so that both are measured doing the same work,
# Vigil's admission must not shed the closed loop for a predicted TTFT or a decode rate
# past its default targets (which a busy machine reaches at c=16).
VIGIL_DEPLOYMENT = f"""
[[deployments]]
name = "{SMOLLM2}"
model = "{SMOLLM2}"
slo = {{ ttft_p99_s = 3600.0, min_tokens_per_s = 0.0 }}
"""


@dataclass(slots=True)
class Timing:
    """One streamed request, from sending it: first token, mean gap between tokens."""

    ttft_s: float
    itl_s: float | None  # None with fewer than two tokens
    num_tokens: int


@dataclass(slots=True)
class Workload:
    concurrencies: list[int]
    requests_per_client: int
    output_tokens: int
    prefix_requests: int
    repeats: int


@dataclass
class ServerRun:
    """Per figure name, one value per repeat; memory in bytes after the run."""

    figures: dict[str, list[float]] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.figures.setdefault(name, []).append(value)


# ---- the workload ----------------------------------------------------------------


class Prompts:
    """Random ordinary tokens, seeded: the same prompts for both servers."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self.prefix = self.tokens(PREFIX_TOKENS)

    def tokens(self, n: int) -> list[int]:
        return [self._rng.randrange(VOCAB_LOW, VOCAB_HIGH) for _ in range(n)]

    def unique(self) -> list[int]:
        return self.tokens(PROMPT_TOKENS)

    def shared(self) -> list[int]:
        return self.prefix + self.tokens(PROMPT_TOKENS - PREFIX_TOKENS)


async def stream_completion(
    client: httpx.AsyncClient, model: str, prompt: list[int], max_tokens: int
) -> Timing:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.monotonic()
    token_ts: list[float] = []
    usage_tokens: int | None = None
    async with client.stream("POST", "/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            raise SystemExit(f"{client.base_url}: HTTP {resp.status_code}: {await resp.aread()!r}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage_tokens = int(chunk["usage"]["completion_tokens"])
            choices = chunk.get("choices") or []
            if choices and choices[0].get("text"):
                token_ts.append(time.monotonic())
    if not token_ts:
        raise SystemExit(f"{client.base_url}: a stream ended without a token")
    # A chunk may carry more than one token (a character split across tokens), so the
    # count comes from usage where the server sends it.
    n = usage_tokens or len(token_ts)
    itl = (token_ts[-1] - token_ts[0]) / (n - 1) if n > 1 else None
    return Timing(token_ts[0] - t0, itl, n)


async def closed_loop(
    base: str,
    model: str,
    prompts: list[list[int]],
    concurrency: int,
    max_tokens: int,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[float, list[Timing]]:
    """Output tokens/s over the wall time, and each request's timing."""
    queue = list(reversed(prompts))
    timings: list[Timing] = []
    # A connection per request, for both servers: llama-server closes idle keep-alive
    # connections, and a request sent on one just as it closes fails with no response.
    limits = httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=0)
    client = httpx.AsyncClient(base_url=base, timeout=600, limits=limits, transport=transport)
    async with client:

        async def client_loop() -> None:
            while queue:
                timings.append(await stream_completion(client, model, queue.pop(), max_tokens))

        t0 = time.monotonic()
        await asyncio.gather(*(client_loop() for _ in range(concurrency)))
        wall_s = time.monotonic() - t0
    return sum(t.num_tokens for t in timings) / wall_s, timings


def run_workload(
    base: str, model: str, work: Workload, transport: httpx.AsyncBaseTransport | None = None
) -> ServerRun:
    """`transport`: a stand-in for the network in tests."""
    prompts = Prompts(seed=0)
    run = ServerRun()
    # Warm-up: the first requests pay for lazy set-up (thread pools, compiled kernels).
    warm = [prompts.unique() for _ in range(2)]
    asyncio.run(closed_loop(base, model, warm, 2, 4, transport))
    for _ in range(work.repeats):
        for c in work.concurrencies:
            batch = [prompts.unique() for _ in range(c * work.requests_per_client)]
            tps, timings = asyncio.run(
                closed_loop(base, model, batch, c, work.output_tokens, transport)
            )
            run.add(f"c={c} tok/s", tps)
            run.add(f"c={c} TTFT p50 ms", 1000 * statistics.median(t.ttft_s for t in timings))
            itls = [t.itl_s for t in timings if t.itl_s is not None]
            if itls:
                run.add(f"c={c} ITL p50 ms", 1000 * statistics.median(itls))
        if work.prefix_requests:
            # The first request puts the prefix in the cache; the rest should hit it.
            batch = [prompts.shared() for _ in range(work.prefix_requests + 1)]
            _, timings = asyncio.run(closed_loop(base, model, batch, 1, 4, transport))
            ttfts = [t.ttft_s for t in timings[1:]]
            run.add("prefix c=1 TTFT p50 ms", 1000 * statistics.median(ttfts))
    return run


# ---- the servers -------------------------------------------------------------------


def find_llama_server(flag: str | None) -> Path:
    where = flag or os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")
    if not where or not Path(where).is_file():
        raise SystemExit(
            f"llama-server not found ({where or 'no --llama-server, $LLAMA_SERVER or PATH'}). "
            "Build it with: WORK=/tmp/llama bash ../shared/bench/build_llama_server.sh "
            "and pass --llama-server /tmp/llama/llama.cpp/build/bin/llama-server"
        )
    return Path(where)


@contextlib.contextmanager
def llama_server(
    binary: Path, gguf: Path, threads: int, slots: int, timeout_s: float = 120
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """llama-server with one slot per client of the largest concurrency, each slot
    room for 1,024 tokens, continuous batching; stopped on exit."""
    port = free_port()
    cmd = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["-c", str(1024 * slots), "-np", str(slots), "--cont-batching"]
    cmd += ["-t", str(threads), "-a", LLAMA_ALIAS]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while not _healthy(base):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"{' '.join(cmd)}: not ready in {timeout_s} s")
            time.sleep(0.3)
        yield base, proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += [int(child), *descendants(int(child))]
    return found


# ---- the table ------------------------------------------------------------------------


def spread(values: list[float]) -> str:
    mid = statistics.median(values)
    if len(values) == 1:
        return f"{mid:.1f}"
    return f"{mid:.1f} ({min(values):.1f}-{max(values):.1f})"


def format_table(runs: dict[str, ServerRun], peer: str = "llama-server") -> str:
    """One column per server run, then one ratio column per run against the peer's."""
    names = list(runs)
    others = [n for n in names if n != peer] if peer in runs else []
    figures = list(dict.fromkeys(f for r in runs.values() for f in r.figures))
    memory = list(dict.fromkeys(m for r in runs.values() for m in r.memory))
    header = ["figure", *names, *(f"{n}/{peer}" for n in others)]
    rows = []
    for fig in figures:
        vals = {n: runs[n].figures.get(fig) for n in names}
        row = [fig, *(spread(v) if v else "-" for v in vals.values())]
        base = vals.get(peer)
        for n in others:
            value = vals[n]
            ratio = statistics.median(value) / statistics.median(base) if base and value else None
            row.append(f"{ratio:.2f}x" if ratio is not None else "-")
        rows.append(row)
    for mem in memory:
        sizes = {n: runs[n].memory.get(mem) for n in names}
        row = [f"RSS {mem} MB", *(f"{v / 1e6:.0f}" if v else "-" for v in sizes.values())]
        base_b = sizes.get(peer)
        for n in others:
            size = sizes[n]
            row.append(f"{size / base_b:.2f}x" if base_b and size else "")
        rows.append(row)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for r in [header, *rows]:
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
    return "\n".join(lines)


def vigil_run(extra_flags: str, work: Workload) -> ServerRun:
    data_dir = Path(tempfile.mkdtemp())
    (data_dir / "bench.toml").write_text(VIGIL_DEPLOYMENT)
    flags = (SMOLLM2, "--config", str(data_dir / "bench.toml"))
    with vigil_serve_process(*flags, *shlex.split(extra_flags), data_dir=data_dir) as (
        base,
        proc,
    ):
        run = run_workload(base, SMOLLM2, work)
        gateway = rss_bytes(proc.pid)
        worker = sum(rss_bytes(p) for p in descendants(proc.pid))
        run.memory.update(total=gateway + worker, gateway=gateway, worker=worker)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-server", help="path of llama-server (else $LLAMA_SERVER, PATH)")
    parser.add_argument("--servers", default="llama-server,vigil", help="which to run, in order")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=OUTPUT_TOKENS)
    parser.add_argument("--prefix-requests", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--llama-threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--vigil-args",
        action="append",
        help="extra `vigil serve` flags; repeat for several Vigil runs, a column each",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: c=1,2, 8 tokens")
    args = parser.parse_args()
    work = Workload(
        [int(c) for c in args.concurrency.split(",")],
        args.requests_per_client,
        args.tokens,
        args.prefix_requests,
        args.repeats,
    )
    if args.quick:
        work = Workload([1, 2], 1, 8, 1, 1)
    gguf = bundled_source(SMOLLM2).path  # what `vigil serve` loads, given to both
    servers = args.servers.split(",")
    print(f"{gguf.name}; {' '.join(sys.argv[1:])}", flush=True)
    runs: dict[str, ServerRun] = {}
    for name in servers:
        if name == "llama-server":
            binary = find_llama_server(args.llama_server)
            with llama_server(binary, gguf, args.llama_threads, max(work.concurrencies)) as (
                base,
                proc,
            ):
                runs[name] = run_workload(base, LLAMA_ALIAS, work)
                runs[name].memory["total"] = rss_bytes(proc.pid)
        elif name == "vigil":
            for extra in args.vigil_args or [""]:
                label = f"vigil {extra}".strip()
                runs[label] = vigil_run(extra, work)
                print(f"{label}: done", flush=True)
            continue
        else:
            raise SystemExit(f"unknown server {name!r} (llama-server, vigil)")
        print(f"{name}: done", flush=True)
    print(format_table(runs))


if __name__ == "__main__":
    main()
