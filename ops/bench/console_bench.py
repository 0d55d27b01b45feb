"""The console's costs, measured on a real `vigil serve` with the bundled chat model:

1. the gateway's CPU while N browsers hold the overview's live stream open (each gets
   the stats fragment and every deployment's chart point once a second), against the
   same gateway with none;
2. how long after an operator confirms a canary weight in the console the first request
   is served by the canary (requests sent one after another, one token each).

    .venv/bin/python ops/bench/console_bench.py [--streams 50] [--seconds 20]

Run it on an idle machine: the CPU figure is the gateway process's own (user + system
time from /proc), not the worker's or this client's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from serve import _ready, free_port

MODEL = "smollm2-135m-instruct"
USER, PASSWORD = "bench", "bench-password-1"


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def hold_streams(base: str, num_streams: int, seconds: float) -> int:
    """Hold `num_streams` live streams open for `seconds`, reading every message; the
    number of messages read."""
    messages = 0

    async def one(client: httpx.AsyncClient) -> None:
        nonlocal messages
        async with client.stream("GET", f"{base}/console/stream") as stream:
            async for line in stream.aiter_lines():
                if line.startswith("event: stats"):
                    messages += 1

    async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None)) as client:
        tasks = [asyncio.create_task(one(client)) for _ in range(num_streams)]
        await asyncio.sleep(seconds)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return messages


def measure_streams(base: str, pid: int, num_streams: int, seconds: float) -> None:
    before, start = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    idle = (cpu_s(pid) - before) / (time.monotonic() - start)
    before, start = cpu_s(pid), time.monotonic()
    messages = asyncio.run(hold_streams(base, num_streams, seconds))
    busy = (cpu_s(pid) - before) / (time.monotonic() - start)
    print(f"gateway CPU, no console open:        {idle * 100:6.1f}% of one core")
    print(f"gateway CPU, {num_streams} live streams open:   {busy * 100:6.1f}% of one core")
    per_stream = (busy - idle) * 100 / num_streams
    print(f"  ({messages} stream messages in {seconds:.0f} s; {per_stream:.2f}% per stream)")


def console_client(base: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=60)
    client.get("/console/login")
    token = client.cookies["vigil_csrf"]
    signed_in = client.post(
        "/console/login", data={"username": USER, "password": PASSWORD, "_csrf_token": token}
    )
    assert signed_in.status_code == 303, signed_in.text
    client.headers.update({"x-csrftoken": token, "hx-request": "true"})
    return client


def measure_canary(base: str) -> None:
    console = console_client(base)
    form = {"model": MODEL, "version": "canary", "artifact": f"bundled:{MODEL}"}
    assert console.post("/console/versions", data=form).status_code == 200
    set_canary(console, 0)
    key = f"{MODEL}@canary"
    served_by = f"{MODEL}/canary"  # x-vigil-served-by names model/version
    while httpx.get(f"{base}/readyz").json().get("versions", {}).get(key) != "ready":
        time.sleep(0.5)
    body = {"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}
    with httpx.Client(base_url=base, timeout=60) as api:
        api.post("/v1/chat/completions", json=body)  # warm
        changed_ts = time.monotonic()
        set_canary(console, 10)
        confirmed_s = time.monotonic() - changed_ts
        num_requests = 0
        while True:
            num_requests += 1
            answer = api.post("/v1/chat/completions", json=body)
            if answer.headers.get("x-vigil-served-by") == served_by:
                break
            assert num_requests < 1000, "the canary served none of 1000 requests"
    first_s = time.monotonic() - changed_ts
    print(f"canary weight 10% confirmed in the console: answered in {confirmed_s * 1000:.0f} ms")
    print(
        f"first request served by the canary: {first_s:.2f} s after the change "
        f"(request {num_requests} sent after it, one token each)"
    )


def set_canary(console: httpx.Client, weight: int) -> None:
    page = console.get("/console/deployments").text
    revision = page.split('data-revision="', 1)[1].split('"', 1)[0]
    form = {"version": "canary", "weight": str(weight), "revision": revision}
    answer = console.post(f"/console/deployments/{MODEL}/canary", data=form)
    assert answer.status_code == 200, answer.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    vigil = Path(sys.executable).with_name("vigil")
    data_dir, port = tempfile.mkdtemp(), free_port()
    subprocess.run(
        [str(vigil), "admin", "create", "--username", USER, "--role", "operator",
         "--password-stdin", "--data-dir", data_dir],
        input=PASSWORD, text=True, check=True, capture_output=True,
    )  # fmt: skip
    flags = [
        "--port",
        str(port),
        "--data-dir",
        data_dir,
        MODEL,
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen([str(vigil), "serve", *flags, "--kv-cache-memory", "96MiB"])
    base = f"http://127.0.0.1:{port}"
    try:
        while not _ready(base, 1):
            assert proc.poll() is None, "vigil serve exited"
            time.sleep(0.5)
        measure_streams(base, proc.pid, args.streams, args.seconds)
        measure_canary(base)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
