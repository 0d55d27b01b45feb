"""The SLO loop, measured: a drill's timeline on a real `vigil serve`, webhook delivery
latency, and what SLI accounting costs each request.

    .venv/bin/python ops/bench/slo_drill.py [--load-s 14] [--messages 200]
        [--records 100000] [--database-url postgresql+asyncpg://...]
    .venv/bin/python ops/bench/slo_drill.py --burst [--burst-s 30] [--watch-s 300]
        [--streams 40] [--window-s 3600]

1. Timeline. `vigil serve` (one torch thread) with a chat deployment whose SLO has a
   1-hour window (page windows of 5 s and 417 ms) and a 50 ms TTFT target, and a fallback
   deployment; a webhook to a receiver on 127.0.0.1. Closed-loop chat load (5 interactive
   clients, 1 batch) for --load-s, then none. Prints each step (alert fired, page
   delivered, batch shed, fallback, resolved, fallback off, shed off) in seconds after
   the load started and after the step before.
2. Delivery latency. A control plane (SQLite in a temporary folder, or --database-url),
   a receiver on 127.0.0.1, and the delivery loop; --messages alerts fired one after
   another, each timed from the call that writes it to its arrival. Once with the loop
   woken by the write (what Vigil runs) and once polling only (the baseline).
3. SLI accounting. --records request records through the SLO tracker (the per-request
   work the SLIs add), against the same records through the recorder's metrics alone.
4. --burst, alone: the alerts one burst raises on a `vigil serve` whose chat deployment
   has the default SLO (no SLO set; --window-s sets only its window, to compare). The
   bundled chat model with --max-num-seqs 8; --streams closed-loop interactive streams
   of 64 tokens for --burst-s, enough to shed and miss the TTFT target on a small CPU;
   then --watch-s of quiet. Prints, per alert, how often it fired and resolved
   (delivered to a webhook on 127.0.0.1) and whether it still fires at the end. Run with
   another Vigil's python to count the same burst's alerts on that one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry
from serve import create_user, vigil_serve

from vigil.engine.request import Priority, RequestClock
from vigil.platform.alerts.connect import webhook_client
from vigil.platform.alerts.delivery import WebhookDelivery
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.migrate import migrate
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.specs import SLOTargets
from vigil.platform.control.webhooks.addresses import WebhookAddressPolicy
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.telemetry.live import LiveSeries
from vigil.platform.telemetry.metrics import Metrics
from vigil.platform.telemetry.recorder import Outcome, RequestRecord, RequestRecorder

ADMIN = ("bench", "bench-password-1")
CONFIG = """
[[versions]]
model = "smollm2-135m-instruct"
version = "lite"
artifact = "bundled:smollm2-135m-instruct"

[[deployments]]
name = "chat"
model = "smollm2-135m-instruct"
max_tokens = 8
slo = { ttft_p99_s = 0.05, min_tokens_per_s = 0.1, window_s = 3600 }
fallback = { deployment = "chat-lite", trigger = "queue_wait", threshold_s = 600 }

[[deployments]]
name = "chat-lite"
model = "smollm2-135m-instruct"
version = "lite"
max_tokens = 8
slo = { ttft_p99_s = 60, min_tokens_per_s = 0.1, window_s = 3600 }
"""


class Receiver:
    """Records each POST's arrival (time.time() and perf_counter()) and body."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, float, dict[str, Any]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                receiver.arrivals.append((time.time(), time.perf_counter(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


# ---- 1. the drill's timeline


async def _load(url: str, seconds: float) -> dict[str, int]:
    counts: dict[str, int] = {}
    stop = time.monotonic() + seconds

    async def one(client: httpx.AsyncClient, priority: str) -> None:
        while time.monotonic() < stop:
            r = await client.post(
                "/v1/chat/completions",
                json={"model": "chat", "messages": [{"role": "user", "content": "Hi there!"}]},
                headers={"x-vigil-priority": priority},
            )
            via = "fallback" if r.headers.get("x-vigil-fallback-from") else "chat"
            kind = f"{priority} {r.status_code} {via if r.status_code == 200 else ''}".strip()
            counts[kind] = counts.get(kind, 0) + 1
            if r.status_code != 200:
                await asyncio.sleep(0.05)

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await asyncio.gather(*(one(client, p) for p in ["interactive"] * 5 + ["batch"]))
    return counts


def timeline(load_s: float) -> None:
    data_dir = Path(tempfile.mkdtemp())
    (data_dir / "vigil.toml").write_text(CONFIG)
    create_user(data_dir, *ADMIN, role="operator")
    receiver = Receiver()
    flags = ["--config", str(data_dir / "vigil.toml"), "--max-num-seqs", "4"]
    with vigil_serve(*flags, "--torch-threads", "1", data_dir=data_dir) as url:
        hook = {
            "name": "oncall",
            "url": receiver.url,
            "secret": "whsec_bench-0123456789abcdef",
            "events": ["slo.burn", "slo.recovered", "shed", "fallback"],
        }
        r = httpx.post(f"{url}/api/admin/webhooks", json=hook, auth=ADMIN, timeout=30)
        r.raise_for_status()
        t0 = time.time()
        counts = asyncio.run(_load(url, load_s))
        load_end = time.time()
        deadline = time.monotonic() + 60
        while True:
            decisions = httpx.get(
                f"{url}/api/admin/decisions?deployment=chat", auth=ADMIN, timeout=30
            ).json()
            steps = {(d["kind"], d["decision"]) for d in decisions}
            if ("shed_batch", "off") in steps or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    events: list[tuple[float, str]] = [(0.0, "load starts"), (load_end - t0, "load stops")]
    for d in decisions:
        at = datetime.fromisoformat(d["at"]).timestamp() - t0
        detail = f" ({d['details'].get('sli', '')})" if d["kind"] == "alert" else ""
        events.append((at, f"{d['kind']} {d['decision']}{detail}"))
    pages = [(t, b) for t, _, b in receiver.arrivals if b.get("status")]
    for arrived, body in pages:
        alert = body["alerts"][0]["labels"].get("alertname", "?")
        events.append((arrived - t0, f"webhook delivered: {alert} {body['status']}"))
    print(f"\n## Drill timeline (load {load_s:.0f} s; answers: {counts})\n")
    print("| t (s) | since previous (s) | step |")
    print("|---:|---:|---|")
    previous = 0.0
    for at, what in sorted(events):
        print(f"| {at:6.2f} | {at - previous:6.2f} | {what} |")
        previous = at


# ---- 2. delivery latency


async def _delivery(database_url: str | None, messages: int, woken: bool) -> list[float]:
    url = database_url or f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/vigil.db"
    await asyncio.to_thread(migrate, url)
    engine = create_engine(url)
    local = WebhookAddressPolicy(allow_loopback=True)  # the receiver is on 127.0.0.1
    plane = ControlPlane(session_factory(engine), webhook_policy=local)
    receiver = Receiver()
    name = f"bench-{time.monotonic_ns()}"
    await plane.webhooks.create(name, receiver.url, ["slo.burn"], actor="bench")
    latencies: list[float] = []
    async with webhook_client(local) as client:
        wake = plane.outbox_written if woken else asyncio.Event()
        delivery = WebhookDelivery(plane.outbox, client, max_age_s=60, wake=wake)
        loop = asyncio.create_task(delivery.run())
        for i in range(messages):
            t0 = time.perf_counter()
            fired = await plane.alerts.fire(name, f"sli{i}", "page", "bench", {})
            assert fired is not None
            for _ in range(20_000):  # 10 s at most
                if len(receiver.arrivals) > i:
                    break
                await asyncio.sleep(0.0005)
            latencies.append(receiver.arrivals[i][1] - t0)
        loop.cancel()
    await plane.webhooks.delete(name, actor="bench")
    await engine.dispose()
    receiver.server.shutdown()
    return latencies


def delivery(database_url: str | None, messages: int) -> None:
    print(f"\n## Webhook delivery, {messages} alerts, write to arrival at a local receiver\n")
    print("| delivery loop | p50 (ms) | p99 (ms) | max (ms) | p50 vs polling |")
    print("|---|---:|---:|---:|---:|")
    polling = asyncio.run(_delivery(database_url, max(20, messages // 10), woken=False))
    woken = asyncio.run(_delivery(database_url, messages, woken=True))
    base = statistics.median(polling)
    for name, xs in (("woken by the write", woken), ("polling only (baseline)", polling)):
        q = statistics.quantiles(xs, n=100, method="inclusive")
        print(
            f"| {name} | {q[49] * 1e3:.1f} | {q[98] * 1e3:.1f} | {max(xs) * 1e3:.1f} | "
            f"{statistics.median(xs) / base:.3f} |"
        )


# ---- 3. SLI accounting per request


def _records(n: int) -> list[RequestRecord]:
    out = []
    for i in range(n):
        clock = RequestClock(0.0, first_token_ts=0.02 + (i % 7) * 0.01)
        clock.last_token_ts = clock.first_token_ts + 0.3  # type: ignore[operator]
        clock.finished_ts = clock.last_token_ts
        out.append(
            RequestRecord("chat", "m@1", Priority.INTERACTIVE, Outcome.LENGTH, 40, 16, clock)
        )
    return out


def accounting(n: int) -> None:
    records = _records(n)
    tracker = SLOTracker()
    tracker.set_targets({"chat": SLOTargets(ttft_p99_s=0.05)})
    plain = RequestRecorder(Metrics(CollectorRegistry()), LiveSeries())
    with_slis = RequestRecorder(Metrics(CollectorRegistry()), LiveSeries(), tracker)

    def per_request(recorder: RequestRecorder) -> float:
        t0 = time.perf_counter()
        for r in records:
            recorder.admission("chat", "m@1", "admitted", "ok", Priority.INTERACTIVE)
            recorder.ended(r)
        return (time.perf_counter() - t0) / n * 1e6

    per_request(plain)  # warm-up
    base = min(per_request(plain) for _ in range(3))
    full = min(per_request(with_slis) for _ in range(3))
    t0 = time.perf_counter()
    for _ in range(1000):
        tracker.status("chat")
    status_us = (time.perf_counter() - t0) / 1000 * 1e6
    print(f"\n## SLI accounting, {n} requests (admission verdict + end of request)\n")
    print("| recorder | µs per request | vs metrics alone |")
    print("|---|---:|---:|")
    print(f"| metrics alone (baseline) | {base:.2f} | 1.00 |")
    print(f"| metrics + SLO tracker | {full:.2f} | {full / base:.2f} |")
    print(f"\nSLI accounting adds {full - base:.2f} µs per request; one SLO status (the loop")
    print(f"reads one per deployment per second) takes {status_us:.0f} µs.")


# ---- 4. the alerts of one burst on the default SLO


async def _streams(url: str, model: str, seconds: float, streams: int) -> dict[str, int]:
    """Closed-loop interactive streams of 64 tokens; answers by status code."""
    counts: dict[str, int] = {}
    stop = time.monotonic() + seconds
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}],
        "max_tokens": 64,
        "min_tokens": 64,
        "stream": True,
    }

    async def one(client: httpx.AsyncClient) -> None:
        while time.monotonic() < stop:
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                async for _ in r.aiter_bytes():
                    pass
            counts[str(r.status_code)] = counts.get(str(r.status_code), 0) + 1
            if r.status_code != 200:
                await asyncio.sleep(0.1)  # a client backing off a 429 a little

    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await asyncio.gather(*(one(client) for _ in range(streams)))
    return counts


def burst(burst_s: float, watch_s: float, streams: int, window_s: float | None) -> None:
    data_dir = Path(tempfile.mkdtemp())
    create_user(data_dir, *ADMIN, role="operator")
    receiver = Receiver()
    model = "smollm2-135m-instruct"
    flags = [model, "--max-num-seqs", "8", "--torch-threads", "1"]
    with vigil_serve(*flags, data_dir=data_dir) as url:
        admin = httpx.Client(base_url=f"{url}/api/admin", auth=ADMIN, timeout=30)
        hook = {
            "name": "oncall",
            "url": receiver.url,
            "secret": "whsec_bench-0123456789abcdef",
            "events": ["slo.burn", "slo.recovered", "shed", "fallback"],
        }
        admin.post("/webhooks", json=hook).raise_for_status()
        slo = admin.get(f"/deployments/{model}/slo").json()
        if window_s is not None:
            slo = admin.put(f"/deployments/{model}/slo", json={"window_s": window_s}).json()
        t0 = time.monotonic()
        answers = asyncio.run(_streams(url, model, burst_s, streams))
        loaded_s = time.monotonic() - t0
        time.sleep(watch_s)
        firing = admin.get("/alerts?state=firing").json()
        decisions = admin.get(f"/decisions?deployment={model}").json()  # newest first
        admin.close()
    fired: dict[str, list[int]] = {}
    for _, _, body in receiver.arrivals:
        for alert in body["alerts"]:
            labels = alert["labels"]
            name = " ".join(labels[k] for k in ("alertname", "sli", "severity") if k in labels)
            counts = fired.setdefault(name, [0, 0])
            counts[alert["status"] == "resolved"] += 1
    still = {" ".join(("VigilSLOBurn", a["sli"], a["severity"])) for a in firing}
    for kind, name in (("shed_batch", "VigilShedBatch info"), ("fallback", "VigilFallback info")):
        last = next((d["decision"] for d in decisions if d["kind"] == kind), None)
        if last == "on":
            still.add(name)
    print(
        f"\n## One burst on the default SLO (window {slo['window_s']:g} s, admission "
        f"target {slo.get('admission_target', 'none')}): {streams} streams of 64 tokens for "
        f"{loaded_s:.0f} s, then {watch_s:.0f} s quiet; answers {answers}\n"
    )
    print("| alert | fired | resolved | firing at the end |")
    print("|---|---:|---:|---|")
    for name, (n_fired, n_resolved) in sorted(fired.items()):
        print(f"| {name} | {n_fired} | {n_resolved} | {'yes' if name in still else ''} |")
    print(f"\n{sum(f for f, _ in fired.values())} alerts fired in all.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--load-s", type=float, default=14.0)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--database-url", help="the control plane for the delivery bench")
    parser.add_argument("--skip-drill", action="store_true", help="no vigil serve")
    parser.add_argument("--burst", action="store_true", help="count one burst's alerts only")
    parser.add_argument("--burst-s", type=float, default=30.0)
    parser.add_argument("--watch-s", type=float, default=300.0, help="quiet after the burst")
    parser.add_argument("--streams", type=int, default=40)
    parser.add_argument("--window-s", type=float, help="the SLO window (default: Vigil's)")
    args = parser.parse_args()
    if args.burst:
        burst(args.burst_s, args.watch_s, args.streams, args.window_s)
        return
    accounting(args.records)
    delivery(args.database_url, args.messages)
    if not args.skip_drill:
        timeline(args.load_s)


if __name__ == "__main__":
    main()
