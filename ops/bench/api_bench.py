"""What structured outputs, tools and logprobs cost through the OpenAI API of a real
`vigil serve`, measured in one run.

    .venv/bin/python ops/bench/api_bench.py [--concurrency 1,16] [--tokens 32] [--runs 2]
                                            [--vigil-args "--torch-threads 1"]

1. throughput  output tok/s and TTFT at each concurrency C (C streamed chat requests at
               once, the same prompts, greedy, `--tokens` tokens each) for free text, a
               json_schema response_format, a named tool (tool_choice forces it), and
               free text with logprobs (top_logprobs=5). The schema and the tool's
               parameters ask for a long string (minLength), so every mode writes exactly
               `--tokens` tokens and differs only in what each step masks or scores.
               TTFT is the server's (its histogram's mean over the round: arrival to the
               first token, the grammar's compile included) and the client's first
               visible delta (p50): a call's first delta waits for its name, about a
               dozen tokens in. Modes alternate within each round; the best of `--runs`
               rounds is kept (contention on a shared machine only ever slows a run).
2. compile     the grammar of each schema the integration tests use, compiled as the
               gateway compiles it (llguidance on the bundled tokenizer): cold (a schema
               not seen before) and cached, p50/p99 over `--compiles` tries.

Ratios are against free text in the same round. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from serve import vigil_serve

from vigil.engine.bundled import SMOLLM2, bundled_source
from vigil.engine.grammar import GrammarCompiler
from vigil.engine.loaders.gguf import GGUFFile
from vigil.engine.request import Constraint, ConstraintKind
from vigil.platform.gateway.params import FunctionTool, ToolChoice, ToolChoiceMode
from vigil.platform.gateway.tool_formats import ToolFormat, calls_grammar

LONG_TEXT = {"type": "string", "minLength": 2000}  # longer than any run's tokens
STORY = {
    "type": "object",
    "properties": {"title": {"enum": ["Sea", "Rock"]}, "story": LONG_TEXT},
    "required": ["title", "story"],
    "additionalProperties": False,
}
WRITE_TOOL = {
    "type": "function",
    "function": {
        "name": "write_story",
        "parameters": {
            "type": "object",
            "properties": {"text": LONG_TEXT},
            "required": ["text"],
            "additionalProperties": False,
        },
    },
}
MODES: dict[str, dict[str, Any]] = {
    "free text": {"ignore_eos": True},
    "json_schema": {
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": STORY}}
    },
    # The named tool's prompt (the tool listed in its system prompt), decoded free: what
    # the named tool's grammar costs is its ratio to this.
    "tools offered": {"tools": [WRITE_TOOL], "tool_choice": "auto", "ignore_eos": True},
    "named tool": {
        "tools": [WRITE_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "write_story"}},
    },
    "logprobs top 5": {"ignore_eos": True, "logprobs": True, "top_logprobs": 5},
}


def _test_schemas() -> Any:
    """tests/schemas.py, read from the checkout: the bench times the tests' own schema."""
    path = Path(__file__).resolve().parents[2] / "tests" / "schemas.py"
    spec = importlib.util.spec_from_file_location("test_schemas", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The schemas of tests/integration/test_openai_client.py, and the tool grammars made there.
TEST_SCHEMAS: dict[str, dict[str, Any]] = {
    "user record": _test_schemas().USER_RECORD,
    "person (pydantic)": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12, "title": "Name"},
            "age": {"type": "integer", "minimum": 0, "maximum": 120, "title": "Age"},
            "country": {"enum": ["FR", "IT", "UK"], "type": "string", "title": "Country"},
        },
        "required": ["name", "age", "country"],
        "additionalProperties": False,
        "title": "Person",
    },
}
TOOLS = [
    FunctionTool(
        "get_weather",
        None,
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 16},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    ),
    FunctionTool(
        "get_time",
        None,
        {
            "type": "object",
            "properties": {"timezone": {"enum": ["UTC", "CET", "JST"]}},
            "required": ["timezone"],
            "additionalProperties": False,
        },
    ),
]


def prompt(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write story number {i} about a lighthouse keeper."}]


async def one(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[int, float]:
    """(output tokens, seconds to the first token) of one streamed chat request."""
    t0 = time.monotonic()
    ttft: float | None = None
    tokens = 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200, (await r.aread()).decode()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif ttft is None and any(
                c["delta"].get("content") or c["delta"].get("tool_calls") for c in chunk["choices"]
            ):
                ttft = time.monotonic() - t0
    return tokens, ttft or 0.0


async def ttft_total(client: httpx.AsyncClient) -> tuple[float, float]:
    """The gateway's TTFT histogram: (sum of seconds, count), every label together."""
    text = (await client.get("/metrics")).text
    total = {"_sum": 0.0, "_count": 0.0}
    for line in text.splitlines():
        for suffix in total:
            if line.startswith(f"vigil_time_to_first_token_seconds{suffix}{{"):
                total[suffix] += float(line.rsplit(" ", 1)[1])
    return total["_sum"], total["_count"]


async def round_of(
    client: httpx.AsyncClient, mode: str, concurrency: int, tokens: int, tag: int
) -> tuple[float, float, float]:
    """(output tok/s, server TTFT mean, client first-delta p50) of `concurrency` requests
    at once."""
    bodies = [
        {
            "model": SMOLLM2,
            "messages": prompt(tag * 100 + i),
            "max_tokens": tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            **MODES[mode],
        }
        for i in range(concurrency)
    ]
    before = await ttft_total(client)
    t0 = time.monotonic()
    results = await asyncio.gather(*(one(client, b) for b in bodies))
    wall_s = time.monotonic() - t0
    after = await ttft_total(client)
    assert all(n == tokens for n, _ in results), f"{mode}: {[n for n, _ in results]} tokens"
    server_ttft_s = (after[0] - before[0]) / max(1.0, after[1] - before[1])
    first_delta_s = statistics.median(t for _, t in results)
    return sum(n for n, _ in results) / wall_s, server_ttft_s, first_delta_s


async def throughput(base: str, levels: list[int], tokens: int, runs: int) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=600) as client:
        best: dict[tuple[str, int], tuple[float, float, float]] = {}
        for c in levels:
            for r in range(runs + 1):  # round 0 warms up (and compiles the grammars)
                order = list(MODES) if r % 2 else list(reversed(MODES))
                for mode in order:
                    result = await round_of(client, mode, c, tokens, r)
                    seen = best.get((mode, c))
                    if r and (seen is None or result[0] > seen[0]):
                        best[(mode, c)] = result
        print(
            f"\n{'mode':<16}{'c':>4}{'tok/s':>9}{'vs free':>9}{'TTFT (server)':>15}"
            f"{'first delta p50':>17}"
        )
        for c in levels:
            for mode in MODES:
                twin = "tools offered" if mode == "named tool" else "free text"
                tok_s, ttft, delta = best[(mode, c)]
                ratio = tok_s / best[(twin, c)][0]
                print(
                    f"{mode:<16}{c:>4}{tok_s:>9.1f}{ratio:>8.2f}x{ttft * 1e3:>12.0f} ms"
                    f"{delta * 1e3:>14.0f} ms"
                )
        print("(vs free: a named tool against the same prompt decoded free, 'tools offered')")


def compile_times(num_compiles: int) -> None:
    tokenizer = GGUFFile(bundled_source(SMOLLM2).path).tokenizer()
    compiler = GrammarCompiler(tokenizer, tokenizer.vocab_size)
    constraints: dict[str, Any] = {
        name: lambda i, s=schema: Constraint.json_schema({**s, "$comment": str(i)})
        for name, schema in TEST_SCHEMAS.items()
    }
    for name, choice in [
        ("named tool", ToolChoice(ToolChoiceMode.FUNCTION, "get_weather")),
        ("required, 2 tools", ToolChoice(ToolChoiceMode.REQUIRED)),
    ]:
        constraints[name] = lambda i, c=choice: Constraint(
            ConstraintKind.GRAMMAR,
            calls_grammar(ToolFormat.HERMES, TOOLS, c, True) + f"\n// {i}",
        )
    compiler.compile(Constraint.json_object())  # the tokenizer's table, built once
    print(f"\n{'grammar':<20}{'cold p50':>10}{'cold p99':>10}{'cached p50':>12}{'cached p99':>12}")
    for name, make in constraints.items():
        cold, cached = [], []
        for i in range(num_compiles):
            constraint = make(i)  # not seen before: compiled
            t0 = time.perf_counter()
            compiler.compile(constraint)
            cold.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            compiler.compile(constraint)
            cached.append(time.perf_counter() - t0)
        print(
            f"{name:<20}{_ms(cold, 50):>10}{_ms(cold, 99):>10}{_ms(cached, 50):>12}"
            f"{_ms(cached, 99):>12}"
        )


def _ms(values: list[float], q: int) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, len(ordered) * q // 100)] * 1e3:.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--compiles", type=int, default=50)
    parser.add_argument("--vigil-args", default="--torch-threads 1")
    parser.add_argument("--only", default="throughput,compile")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if "compile" in only:
        compile_times(args.compiles)
    if "throughput" in only:
        levels = [int(c) for c in args.concurrency.split(",")]
        flags = [*args.vigil_args.split(), "--max-num-seqs", str(max(32, *levels))]
        with vigil_serve(*flags) as base:
            asyncio.run(throughput(base, levels, args.tokens, args.runs))


if __name__ == "__main__":
    main()
