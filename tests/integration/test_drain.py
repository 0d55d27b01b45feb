"""SIGTERM drains before it stops, on a real `vigil serve`: the gateway fails /readyz at
once, finishes the 8 streams it is running and then refuses connections; a worker told
to stop gets no new request (the gateway routes to the other) and finishes its own."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"
TOKENS = 40


def stream(url: str, out: list[dict[str, Any]], started: threading.Event) -> None:
    """One streamed completion: its replica, its tokens, whether it ended with [DONE]."""
    body = {
        "model": MODEL,
        "prompt": "The lighthouse keeper wrote",
        "max_tokens": TOKENS,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    result: dict[str, Any] = {"chunks": 0, "done": False, "tokens": 0}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as r:
        result["status"] = r.status_code
        result["replica"] = r.headers.get("x-vigil-replica")
        out.append(result)  # seen while it runs: where it runs
        for line in r.iter_lines():
            if line == "data: [DONE]":
                result["done"] = True
            elif line.startswith("data: {"):
                result["chunks"] += 1
                usage = json.loads(line[len("data: ") :]).get("usage")
                if usage:
                    result["tokens"] = usage["completion_tokens"]
                started.set()


def run_streams(url: str, n: int) -> tuple[list[threading.Thread], list[dict[str, Any]]]:
    out: list[dict[str, Any]] = []
    threads = []
    for _ in range(n):
        started = threading.Event()
        t = threading.Thread(target=stream, args=(url, out, started), daemon=True)
        t.start()
        assert started.wait(120), "a stream did not start"
        threads.append(t)
    return threads, out


def worker_pid(gateway_pid: int, worker_id: str) -> int:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == gateway_pid and worker_id.encode() in cmdline:
            return int(proc.name)
    raise AssertionError(f"no worker {worker_id} under {gateway_pid}")


def test_sigterm_on_the_gateway_finishes_its_streams_then_stops(
    tmp_path_factory, launch_vigil
) -> None:  # type: ignore[no-untyped-def]
    data_dir = tmp_path_factory.mktemp("drain-gateway")
    flags = ["--drain-delay", "1", "--drain-timeout", "60", "--max-num-seqs", "8"]
    with launch_vigil(data_dir, *flags) as vigil:
        url = vigil.base_url
        threads, results = run_streams(url, 8)
        os.kill(vigil.pid, signal.SIGTERM)
        t0 = time.monotonic()
        while True:  # readiness fails at once, while the listener still answers
            ready = httpx.get(f"{url}/readyz", timeout=5)
            if ready.status_code == 503:
                break
            assert time.monotonic() - t0 < 2.0, "/readyz did not fail"
            time.sleep(0.05)
        assert ready.json()["status"] == "draining"
        for t in threads:
            t.join(120)
        assert len(results) == 8
        assert all(r["status"] == 200 and r["done"] for r in results), results
        assert all(r["tokens"] == TOKENS for r in results), results  # every token came
        deadline = time.monotonic() + 30
        while True:  # the listener is closed: nothing new lands here
            try:
                httpx.get(f"{url}/healthz", timeout=1)
            except httpx.TransportError:
                break
            assert time.monotonic() < deadline, "the gateway kept taking connections"
            time.sleep(0.2)


def test_sigterm_on_a_worker_moves_new_requests_and_finishes_its_streams(
    tmp_path_factory, launch_vigil
) -> None:  # type: ignore[no-untyped-def]
    data_dir = tmp_path_factory.mktemp("drain-worker")
    with launch_vigil(data_dir, "--workers", "2", "--drain-timeout", "60") as vigil:
        url = vigil.base_url
        deadline = time.monotonic() + 180
        while True:  # both workers up, with the chat model loaded on each
            metrics = httpx.get(f"{url}/metrics", timeout=5).text.splitlines()
            up = [x for x in metrics if x.startswith("vigil_worker_up{") and x.endswith(" 1.0")]
            # An engine reports its KV blocks once loaded: a worker still loading (on a
            # first start it also builds the native kernels) would not take the moved
            # requests.
            loaded = {
                replica
                for x in metrics
                if x.startswith("vigil_kv_cache_free_blocks{") and MODEL in x
                for replica in ("local-0", "local-1")
                if f'replica="{replica}"' in x
            }
            if len(up) == 2 and len(loaded) == 2:
                break
            assert time.monotonic() < deadline, "two workers did not come up with the model"
            time.sleep(0.5)
        threads, results = run_streams(url, 4)
        # Stop a worker that is running streams (routing may have put them all on one).
        target = results[0]["replica"]
        other = {"local-0": "local-1", "local-1": "local-0"}[target]
        os.kill(worker_pid(vigil.pid, target), signal.SIGTERM)
        time.sleep(0.5)  # its draining heartbeat
        later = []
        for _ in range(4):
            r = httpx.post(
                f"{url}/v1/completions",
                json={"model": MODEL, "prompt": "Hi", "max_tokens": 2},
                timeout=60,
            )
            assert r.status_code == 200, r.text
            later.append(r.headers["x-vigil-replica"])
        assert set(later) == {other}, later
        for t in threads:
            t.join(120)
        assert len(results) == 4
        assert all(r["status"] == 200 and r["done"] for r in results), results
        assert target in {r["replica"] for r in results}  # it had streams, and finished them
