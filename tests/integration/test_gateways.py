"""Two `vigil serve --workers 0` gateways on one PostgreSQL database of this test's own,
sharing a private Redis, and one `vigil worker` registered with both: a change made through one
gateway shows on the other within 2 s; a key's rate limit is one limit, not one per
gateway; a page fired while both serve is delivered once to a real receiver, and when
the gateway running the SLO loop is killed the other takes it over; the worker keeps
serving a stream when a gateway dies, and registers with it again when it is back.

The gateways and the timings are those of ops/bench/gateways_bench.py (imported)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from vigil.platform.alerts.signing import DELIVERY_HEADER

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

BENCH = Path(__file__).resolve().parents[2] / "ops" / "bench" / "gateways_bench.py"
CONFIG = """
[[deployments]]
name = "chat"
model = "smollm2-135m-instruct"
max_tokens = 4
slo = { ttft_p99_s = 0.001, min_tokens_per_s = 0.1, window_s = 3600 }
"""  # a TTFT target no request meets: every request burns the budget


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gateways_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@dataclass
class Cluster:
    bench: ModuleType
    folder: Path
    a: Any  # gateways_bench.Gateway
    b: Any


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, redis_server) -> Iterator[Cluster]:  # type: ignore[no-untyped-def]
    bench = load_bench()
    folder = tmp_path_factory.mktemp("gateways")
    (folder / "vigil.toml").write_text(CONFIG)
    flags = ("--config", str(folder / "vigil.toml"), "--redis-url", redis_server.url)
    with (
        bench.database("vigil_test_gateways") as url,
        bench.gateways(url, folder, *flags) as (a, b),
    ):
        yield Cluster(bench, folder, a, b)


@pytest.fixture(scope="module")
def worker(cluster: Cluster) -> Iterator[subprocess.Popen[bytes]]:
    """One worker, registered with both gateways, serving the chat model on both."""
    a, b = cluster.a, cluster.b
    cmd = [str(cluster.bench.VIGIL), "worker", "--gateway", a.url, "--gateway", b.url]
    cmd += ["--worker-id", "shared-1", "--torch-threads", "1", "--kv-cache-memory", "96MiB"]
    env = {**os.environ, "VIGIL_WORKER_TOKEN": cluster.bench.WORKER_TOKEN}
    with open(cluster.folder / "worker.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        for gateway in (a, b):
            cluster.bench.wait_for(lambda g=gateway: ready(g), "the worker ready on both", 300)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ready(gateway: Any) -> bool:
    try:
        return httpx.get(f"{gateway.url}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def worker_up(gateway: Any, worker_id: str) -> bool:
    metrics = httpx.get(f"{gateway.url}/metrics", timeout=5).text
    return f'vigil_worker_up{{replica="{worker_id}"}} 1.0' in metrics


def test_a_change_through_one_gateway_shows_on_the_other_within_2_s(cluster: Cluster) -> None:
    bench, a, b = cluster.bench, cluster.a, cluster.b
    bench.register_canary(a)
    canary = bench.canary_changes(a, b, 2)
    revokes = bench.key_revokes(a, b, 2)
    assert max(canary + revokes) < 2.0, (canary, revokes)


def test_a_keys_rate_limit_holds_across_gateways(cluster: Cluster) -> None:
    a, b = cluster.a, cluster.b
    name = f"limited-{uuid.uuid4().hex[:8]}"  # Redis lives all session: a name of its own
    created = a.admin("POST", "/keys", {"name": name, "rate_limit_per_minute": 4})
    assert created.status_code == 201, created.text
    headers = {"Authorization": f"Bearer {created.json()['key']}"}
    codes = [httpx.get(f"{g.url}/v1/models", headers=headers).status_code for g in (a, b) * 2]
    assert codes == [200] * 4
    for gateway in (a, b):  # the fifth request of the minute, wherever it goes
        refused = httpx.get(f"{gateway.url}/v1/models", headers=headers)
        assert refused.status_code == 429, refused.text
        assert 1 <= int(refused.headers["retry-after"]) <= 60


@dataclass
class Receiver:
    """On-call, on 127.0.0.1: every delivery that arrived."""

    deliveries: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def serve(self) -> ThreadingHTTPServer:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                receiver.deliveries.append((self.headers[DELIVERY_HEADER], json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def firing(self) -> list[tuple[str, str]]:
        """(fingerprint, startsAt) of each firing alert delivered: one per episode."""
        return [
            (alert["fingerprint"], alert["startsAt"])
            for _, body in self.deliveries
            for alert in body["alerts"]
            if alert["status"] == "firing"
        ]


async def chat_load(urls: list[str], seconds: float, per_gateway: int = 2) -> int:
    """Closed-loop chat requests to each gateway; how many were answered. Once its rates
    are measured a gateway sheds what cannot meet the impossible target (429)."""
    stop = time.monotonic() + seconds
    body = {"model": "chat", "messages": [{"role": "user", "content": "Hi!"}]}
    done = 0

    async def client(url: str) -> None:
        nonlocal done
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            while time.monotonic() < stop:
                r = await http.post("/v1/chat/completions", json=body)
                assert r.status_code in (200, 429), r.text
                done += r.status_code == 200
                if r.status_code == 429:
                    await asyncio.sleep(0.1)

    await asyncio.gather(*(client(url) for url in urls for _ in range(per_gateway)))
    return done


def test_a_page_goes_out_once_and_the_loop_moves_when_its_owner_dies(
    cluster: Cluster, worker: subprocess.Popen[bytes]
) -> None:
    bench, pair = cluster.bench, [cluster.a, cluster.b]
    receiver = Receiver()
    server = receiver.serve()
    try:
        hook = {
            "name": "oncall",
            "url": f"http://127.0.0.1:{server.server_address[1]}/page",
            "secret": "whsec_gateways-test-0123456789",
            "format": "alertmanager_webhook",
            "events": ["slo.burn"],
        }
        assert pair[0].admin("POST", "/webhooks", hook).status_code == 201
        [owner] = [g for g in pair if g.owner()]
        [other] = [g for g in pair if g is not owner]
        assert asyncio.run(chat_load([g.url for g in pair], seconds=3)) > 0
        bench.wait_for(lambda: receiver.firing(), "the page delivered", 30)

        def recorded() -> bool:  # a kill between the send and its record would resend it
            log = pair[0].admin("GET", "/webhooks/oncall/deliveries").json()
            return bool(log) and all(attempt["delivered"] for attempt in log)

        bench.wait_for(recorded, "the delivery recorded", 30)
        owner.kill()
        took_s = bench.wait_for(other.owner, "the other gateway to own the loops", 10)
        assert took_s < 5.0
        # The page still fires: the new owner picks it up instead of sending it again.
        asyncio.run(chat_load([other.url], seconds=2))
        time.sleep(2)  # a second send, were there one, has come by now
        ids = [delivery_id for delivery_id, _ in receiver.deliveries]
        assert len(ids) == len(set(ids)), "a message was delivered twice"
        episodes = receiver.firing()
        assert len(episodes) == len(set(episodes)), f"a page was sent twice: {episodes}"
    finally:
        server.shutdown()
        for gateway in pair:
            if gateway.proc is None:
                gateway.start()


def test_a_worker_keeps_its_stream_when_a_gateway_dies_and_registers_again(
    cluster: Cluster, worker: subprocess.Popen[bytes]
) -> None:
    bench, a, b = cluster.bench, cluster.a, cluster.b
    bench.wait_for(lambda: ready(a) and ready(b), "the worker ready on both", 60)
    result: dict[str, Any] = {"tokens": 0, "done": False}
    started = threading.Event()

    def stream() -> None:
        body = {
            "model": "smollm2-135m-instruct",
            "prompt": "The lighthouse keeper wrote",
            "max_tokens": 40,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with httpx.stream("POST", f"{b.url}/v1/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    result["done"] = True
                elif line.startswith("data: {"):
                    started.set()
                    usage = json.loads(line[len("data: ") :]).get("usage")
                    if usage:
                        result["tokens"] = usage["completion_tokens"]

    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    assert started.wait(60), "the stream did not start"
    a.kill()
    thread.join(120)
    assert result == {"tokens": 40, "done": True}
    a.start()
    bench.wait_for(lambda: worker_up(a, "shared-1"), "the worker registered again", 30)
    bench.wait_for(lambda: ready(a), "the gateway ready (its tokenizer loaded)", 180)
    body = {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "Hi!"}]}
    body["max_tokens"] = 2
    answered = httpx.post(f"{a.url}/v1/chat/completions", json=body, timeout=60)
    assert answered.status_code == 200 and answered.headers["x-vigil-replica"] == "shared-1"
