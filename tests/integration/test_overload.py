"""Overload on a real `vigil serve`: three times the measured capacity for 30 s is
answered, shed fast where it cannot be served in time, admitted interactive requests
keep their TTFT target, memory does not grow, and the idle engine after it sheds
nothing; a burst at once after a cold start is admitted only as far as the target
allows (the calibration at load is what admission forecasts from)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

TTFT_TARGET_S = 4.0
CONFIG = f"""
[[deployments]]
name = "chat"
model = "smollm2-135m-instruct"
max_tokens = 16
interactive = {{ max_queue = 8, max_queue_wait_s = 20 }}
batch = {{ max_queue = 4, max_queue_wait_s = 20 }}
slo = {{ ttft_p99_s = {TTFT_TARGET_S}, min_tokens_per_s = 1.0 }}
"""
OVERLOAD_FACTOR = 3
OVERLOAD_S = 30.0
MAX_ARRIVALS = 600  # a bound whatever the measured capacity


@dataclass
class Outcome:
    priority: str
    status: int
    ttft_s: float | None = None
    retry_after: str | None = None
    code: str | None = None
    latency_s: float = 0.0


def body(i: int) -> dict[str, Any]:
    return {
        "model": "chat",
        "stream": True,
        "max_tokens": 16,
        "ignore_eos": True,
        "temperature": 0,
        "messages": [{"role": "user", "content": f"Tell me fact number {i} about cats."}],
    }


def has_text(line: str) -> bool:
    """An SSE line carrying output text (the first chunk only names the role)."""
    return '"content":"' in line and '"content":""' not in line


async def one(client: httpx.AsyncClient, i: int, priority: str) -> Outcome:
    t0 = time.monotonic()
    headers = {"x-vigil-priority": priority}
    async with client.stream("POST", "/v1/chat/completions", json=body(i), headers=headers) as r:
        out = Outcome(priority, r.status_code, retry_after=r.headers.get("Retry-After"))
        if r.status_code != 200:
            out.code = json.loads(await r.aread())["error"]["code"]
        else:
            async for line in r.aiter_lines():
                if out.ttft_s is None and has_text(line):
                    out.ttft_s = time.monotonic() - t0
                if '"error"' in line:
                    out.code = json.loads(line[len("data: ") :])["error"]["code"]
    out.latency_s = time.monotonic() - t0
    return out


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def measure_capacity(client: httpx.AsyncClient, seconds: float = 8.0) -> float:
    """Requests/s that 8 closed-loop clients get through."""
    done = 0
    stop = time.monotonic() + seconds

    async def loop(k: int) -> None:
        nonlocal done
        i = 0
        while time.monotonic() < stop:
            out = await one(client, 1000 * k + i, "interactive")
            assert out.status == 200, out
            done += 1
            i += 1

    t0 = time.monotonic()
    await asyncio.gather(*(loop(k) for k in range(8)))
    return done / (time.monotonic() - t0)


async def overload(client: httpx.AsyncClient, rate: float) -> list[Outcome]:
    rng = random.Random(0)
    tasks: list[asyncio.Task[Outcome]] = []
    t0 = time.monotonic()
    i = 0
    while time.monotonic() - t0 < OVERLOAD_S and i < MAX_ARRIVALS:
        priority = "batch" if rng.random() < 1 / 3 else "interactive"
        tasks.append(asyncio.create_task(one(client, i, priority)))
        i += 1
        await asyncio.sleep(rng.expovariate(rate))  # Poisson arrivals
    return list(await asyncio.gather(*tasks))


def test_three_times_capacity_is_shed_not_crashed(tmp_path_factory, launch_vigil) -> None:
    data_dir = tmp_path_factory.mktemp("overload")
    (data_dir / "vigil.toml").write_text(CONFIG)
    flags = [
        "--config",
        str(data_dir / "vigil.toml"),
        "--max-num-seqs",
        "8",
        "--kv-cache-memory",
        "128MiB",
        "smollm2-135m-instruct",
    ]
    with launch_vigil(data_dir, *flags) as server:

        async def scenario() -> tuple[float, list[Outcome], int, int, list[Outcome]]:
            limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
            async with httpx.AsyncClient(
                base_url=server.base_url, timeout=120, limits=limits
            ) as client:
                capacity = await measure_capacity(client)
                rss_before = rss_bytes(server.pid)
                outcomes = await overload(client, OVERLOAD_FACTOR * capacity)
                rss_after = rss_bytes(server.pid)
                # The overload is over: one at a time, every request is served.
                after = [await one(client, 5000 + i, "interactive") for i in range(20)]
                return capacity, outcomes, rss_before, rss_after, after

        capacity, outcomes, rss_before, rss_after, after = asyncio.run(scenario())

    served = [o for o in outcomes if o.status == 200 and o.code is None]
    shed = [o for o in outcomes if o.status == 429]
    timed_out = [o for o in outcomes if o.code == "queue_timeout"]
    interactive_ttfts = sorted(
        o.ttft_s for o in served if o.priority == "interactive" and o.ttft_s is not None
    )
    p99 = interactive_ttfts[max(0, int(0.99 * len(interactive_ttfts)) - 1)]
    print(
        f"\ncapacity {capacity:.2f} req/s; {len(outcomes)} arrivals at "
        f"{OVERLOAD_FACTOR}x for {OVERLOAD_S:.0f} s: {len(served)} served, {len(shed)} shed "
        f"(429), {len(timed_out)} timed out; p99 TTFT of admitted interactive "
        f"{p99:.2f} s (target {TTFT_TARGET_S} s); shed answered in "
        f"{max((o.latency_s for o in shed), default=0):.3f} s at most; RSS "
        f"{rss_before / 2**20:.0f} -> {rss_after / 2**20:.0f} MiB"
    )

    # Every request got an answer, and only the documented kinds.
    assert all(o.status in (200, 429, 503) for o in outcomes), {o.status for o in outcomes}
    assert all(o.code in (None, "queue_timeout") for o in outcomes if o.status == 200)
    assert all(o.code == "queue_timeout" for o in outcomes if o.status == 503)
    assert all(o.retry_after and int(o.retry_after) >= 1 for o in shed)
    # It really was overload, it was shed rather than queued, and shedding was fast.
    assert shed, "3x capacity should have been shed in part"
    assert served, "some requests should still have been served"
    assert max(o.latency_s for o in shed) < 2.0
    # Batch was shed first: a smaller share of interactive arrivals was turned away.
    share = {
        p: sum(o.priority == p for o in shed) / max(1, sum(o.priority == p for o in outcomes))
        for p in ("interactive", "batch")
    }
    assert share["interactive"] <= share["batch"], share
    assert p99 <= TTFT_TARGET_S
    assert rss_after - rss_before < 200 * 2**20
    assert [o.status for o in after] == [200] * 20, [(o.status, o.code) for o in after]


COLD_BURST = 32
COLD_TOKENS = 48
COLD_CONFIG = f"""
[[deployments]]
name = "chat"
model = "smollm2-135m-instruct"
slo = {{ ttft_p99_s = {TTFT_TARGET_S}, min_tokens_per_s = 1.0 }}
"""


def test_a_burst_at_once_after_a_cold_start_is_admitted_as_far_as_the_target_allows(
    tmp_path_factory, launch_vigil
) -> None:
    """8 batch slots, streams of 48 tokens: the first 8 run together, and a request in
    the second wave would wait for one of them to end, far past the 4 s target. The
    engine has served nothing yet; its calibration at load is all admission knows."""
    data_dir = tmp_path_factory.mktemp("cold-burst")
    (data_dir / "vigil.toml").write_text(COLD_CONFIG)
    flags = ["--config", str(data_dir / "vigil.toml"), "--max-num-seqs", "8"]
    flags += ["--kv-cache-memory", "128MiB", "smollm2-135m-instruct"]
    with launch_vigil(data_dir, *flags) as server:

        async def burst() -> list[Outcome]:
            limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
            async with httpx.AsyncClient(
                base_url=server.base_url, timeout=120, limits=limits
            ) as client:

                async def stream(i: int) -> Outcome:
                    request = {**body(i), "max_tokens": COLD_TOKENS}
                    t0 = time.monotonic()
                    async with client.stream("POST", "/v1/chat/completions", json=request) as r:
                        out = Outcome("interactive", r.status_code)
                        async for line in r.aiter_lines():
                            if out.ttft_s is None and has_text(line):
                                out.ttft_s = time.monotonic() - t0
                    return out

                return list(await asyncio.gather(*(stream(i) for i in range(COLD_BURST))))

        outcomes = asyncio.run(burst())
    served = sorted(o.ttft_s for o in outcomes if o.status == 200 and o.ttft_s is not None)
    shed = [o for o in outcomes if o.status == 429]
    print(
        f"\ncold burst of {COLD_BURST}: {len(served)} served, {len(shed)} shed; admitted TTFT "
        f"max {max(served):.2f} s (target {TTFT_TARGET_S} s)"
    )
    assert all(o.status in (200, 429) for o in outcomes), {o.status for o in outcomes}
    assert shed, "the second wave would miss the target: some of the burst is shed"
    assert len(served) >= 8, "the first wave fits the target"
    # The target is a p99; on a loaded CI machine, a margin (the bench has the figure).
    assert served[-1] <= 1.25 * TTFT_TARGET_S
