"""One stream, end to end: the engine called directly vs the same request through HTTP.

Prints a table of TTFT and output tokens/s (greedy, EOS ignored), and the ratio of the
HTTP path to the engine path measured in the same run. Run on an idle machine:

    .venv/bin/python ops/bench/single_stream.py [--tokens 128] [--runs 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

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
from vigil.engine.tokenizer import ChatMessage

QUESTION = "Write a long story about a lighthouse keeper."


def measure_engine(tokens: int, runs: int) -> list[tuple[float, float]]:
    lm = load_language_model(bundled_source(SMOLLM2), torch.device("cpu"), torch.float32)
    prompt = lm.tokenizer.encode(lm.tokenizer.render_chat([ChatMessage("user", QUESTION)]))

    async def run() -> list[tuple[float, float]]:
        engine = AsyncLLMEngine(LLMEngine(lm, EngineConfig()))
        engine.start()
        results = []
        for i in range(runs + 1):  # the first run warms up
            start = time.monotonic()
            request = GenerationRequest(
                RequestId(f"bench-{i}"),
                prompt,
                SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True),
                clock=RequestClock(start),
            )
            stamps = [
                e.token_ts async for e in engine.generate(request) if isinstance(e, TokenEvent)
            ]
            if i:
                results.append((stamps[0] - start, (len(stamps) - 1) / (stamps[-1] - stamps[0])))
        engine.stop()
        return results

    return asyncio.run(run())


def measure_http(tokens: int, runs: int, threads: int) -> list[tuple[float, float]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data_dir = tempfile.mkdtemp(prefix="vigil-bench-")
    vigil = Path(sys.executable).with_name("vigil")
    proc = subprocess.Popen(
        [
            str(vigil),
            "serve",
            "--port",
            str(port),
            "--data-dir",
            data_dir,
            "--models",
            SMOLLM2,
            "--torch-threads",
            str(threads),
            "--log-level",
            "warning",
        ]
    )
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        body = {
            "model": SMOLLM2,
            "stream": True,
            "temperature": 0,
            "max_tokens": tokens,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": QUESTION}],
        }
        results = []
        for i in range(runs + 1):
            start = time.monotonic()
            stamps = []
            with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=300) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        delta = json.loads(line[6:])["choices"]
                        if delta and delta[0]["delta"].get("content"):
                            stamps.append(time.monotonic())
            if i:
                results.append((stamps[0] - start, (len(stamps) - 1) / (stamps[-1] - stamps[0])))
        return results
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = measure_engine(args.tokens, args.runs)
    http = measure_http(args.tokens, args.runs, args.threads)
    rows = []
    for name, res in (("engine (direct)", engine), ("HTTP + SSE", http)):
        ttft = statistics.median(r[0] for r in res) * 1000
        tps = statistics.median(r[1] for r in res)
        rows.append((name, ttft, tps))
    print(
        f"\nSmolLM2-135M, one stream, {args.tokens} tokens greedy, {args.threads} thread(s), "
        f"median of {args.runs}"
    )
    print(f"{'path':<18}{'TTFT ms':>10}{'tokens/s':>11}{'tokens/s vs engine':>21}")
    for name, ttft, tps in rows:
        print(f"{name:<18}{ttft:>10.1f}{tps:>11.1f}{tps / rows[0][2]:>21.2f}")


if __name__ == "__main__":
    main()
