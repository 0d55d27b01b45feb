"""Admission under load, measured on a real `vigil serve`: how first tokens come against
the forecast admission made for them, and what a burst larger than the engine can serve
in time gets, cold and warm.

    .venv/bin/python ops/bench/overload_bench.py [--steady-s 20] [--burst 40] [--flags ...]

The server runs the bundled chat model alone, its deployment's SLO a TTFT p99 of
--target-s (5 s), on `vigil serve`'s defaults otherwise (--flags adds more). Another
Vigil's virtual environment runs it instead when this script is run with that one's
python (for a before/after table).

1. cold burst: at once after the server is ready, --burst streams of 64 tokens.
2. steady: closed loops of 1, 4 and 16 clients, --steady-s each (32-token answers).
3. warm burst: the same burst again.
4. idle after the overload: 20 requests one at a time.

Per phase: requests, shed (429), 5xx, TTFT p50/p99 of the admitted against the target,
and each admitted request's TTFT over the forecast admission made for it (p50/p90),
read from the server's traces (`vigil.admission.predicted_ttft_s`, by request id).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from serve import create_user, vigil_serve

MODEL = "smollm2-135m-instruct"
DEPLOYMENT = "chat"
ADMIN = ("bench", "bench-password-1")


@dataclass
class Result:
    status: int
    ttft_s: float | None = None
    request_id: str | None = None
    code: str | None = None


@dataclass
class Phase:
    name: str
    results: list[Result] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)


def body(i: int, max_tokens: int) -> dict[str, object]:
    return {
        "model": DEPLOYMENT,
        "stream": True,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "messages": [{"role": "user", "content": f"Tell me fact number {i} about the sea."}],
    }


async def one(client: httpx.AsyncClient, i: int, max_tokens: int) -> Result:
    t0 = time.monotonic()
    async with client.stream("POST", "/v1/chat/completions", json=body(i, max_tokens)) as r:
        out = Result(r.status_code, request_id=r.headers.get("x-request-id"))
        if r.status_code != 200:
            out.code = json.loads(await r.aread())["error"]["code"]
            return out
        async for line in r.aiter_lines():
            if out.ttft_s is None and '"content":"' in line and '"content":""' not in line:
                out.ttft_s = time.monotonic() - t0
    return out


async def burst(client: httpx.AsyncClient, n: int) -> list[Result]:
    return list(await asyncio.gather(*(one(client, i, 64) for i in range(n))))


async def closed_loop(client: httpx.AsyncClient, clients: int, seconds: float) -> list[Result]:
    stop = time.monotonic() + seconds
    out: list[Result] = []

    async def loop(k: int) -> None:
        i = 0
        while time.monotonic() < stop:
            out.append(await one(client, 1000 * k + i, 32))
            i += 1

    await asyncio.gather(*(loop(k) for k in range(clients)))
    return out


def forecasts(base: str) -> dict[str, float]:
    """Request id -> admission's forecast TTFT, from the traces the server kept."""
    found: dict[str, float] = {}
    listing = httpx.get(f"{base}/api/admin/traces?limit=1000", auth=ADMIN, timeout=60).json()
    for summary in listing:
        trace = httpx.get(f"{base}/api/admin/traces/{summary['trace_id']}", auth=ADMIN).json()
        attrs: dict[str, object] = {}
        for span in trace["spans"]:
            attrs.update(span["attributes"])
        rid, predicted = (
            attrs.get("vigil.request_id"),
            attrs.get("vigil.admission.predicted_ttft_s"),
        )
        if isinstance(rid, str) and isinstance(predicted, int | float) and predicted > 0:
            found[rid] = float(predicted)
    return found


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def fmt(x: float | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:.2f}{unit}"


def report(phases: list[Phase], target_s: float) -> None:
    print(
        "| phase | requests | shed | 5xx | admitted TTFT p50 | p99 | p99 / target "
        "| actual/forecast p50 | p90 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for p in phases:
        ttfts = [r.ttft_s for r in p.results if r.status == 200 and r.ttft_s is not None]
        p99 = quantile(ttfts, 0.99)
        shed = sum(r.status == 429 for r in p.results)
        errors = sum(r.status >= 500 for r in p.results)
        print(
            f"| {p.name} | {len(p.results)} | {shed} ({shed / max(1, len(p.results)):.0%}) "
            f"| {errors} | {fmt(quantile(ttfts, 0.5), ' s')} | {fmt(p99, ' s')} "
            f"| {fmt(p99 / target_s if p99 is not None else None)} "
            f"| {fmt(quantile(p.ratios, 0.5))} | {fmt(quantile(p.ratios, 0.9))} |"
        )


async def scenario(base: str, args: argparse.Namespace) -> list[Phase]:
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    phases: list[Phase] = []
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:
        phases.append(Phase("cold burst", await burst(client, args.burst)))
        for clients in (1, 4, 16):
            results = await closed_loop(client, clients, args.steady_s)
            phases.append(Phase(f"steady c={clients}", results))
        phases.append(Phase("warm burst", await burst(client, args.burst)))
        idle = [await one(client, i, 16) for i in range(20)]
        phases.append(Phase("idle after", idle))
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steady-s", type=float, default=20.0)
    parser.add_argument("--burst", type=int, default=40)
    parser.add_argument("--target-s", type=float, default=5.0)
    parser.add_argument("--flags", default="", help="more `vigil serve` flags, one string")
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp())
    (data / "vigil.toml").write_text(
        f'[[deployments]]\nname = "{DEPLOYMENT}"\nmodel = "{MODEL}"\n'
        f"slo = {{ ttft_p99_s = {args.target_s} }}\n"
    )
    create_user(data, *ADMIN, role="viewer")
    flags = [MODEL, "--config", str(data / "vigil.toml"), "--trace-buffer", "4000"]
    with vigil_serve(*flags, *args.flags.split(), data_dir=data) as base:
        phases = asyncio.run(scenario(base, args))
        predicted = forecasts(base)
    for p in phases:
        p.ratios = [
            r.ttft_s / predicted[r.request_id]
            for r in p.results
            if r.ttft_s is not None and r.request_id in predicted
        ]
    vigil = Path(sys.executable).with_name("vigil")
    print(f"vigil: {vigil}; target TTFT p99 {args.target_s} s; flags: {' '.join(flags)}")
    report(phases, args.target_s)


if __name__ == "__main__":
    main()
