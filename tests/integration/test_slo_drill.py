"""An SLO drill against a real `vigil serve`, with a real Alertmanager (Debian's package)
and on-call receivers on 127.0.0.1.

The chat deployment's SLO has a 1-hour window on purpose, so its page rule looks at 5 s
and 417 ms, and a TTFT target (50 ms) that a small CPU misses under load. Load that
breaks it: the page fires and reaches a receiver directly (signed, Alertmanager's
payload) and through Alertmanager; batch traffic is shed; interactive traffic falls back
to chat-lite. The direct receiver goes down for a while from just after the first page:
what piles up meanwhile still reaches it in order, each alert's firing before its
resolve. Load removed: the page resolves, the fallback and the shedding end. Each step
is a decision row. Once Vigil has resolved everything, Alertmanager holds no active
Vigil alert. Then the receiver goes down with a delivery owed, Vigil restarts, the
receiver comes back: the delivery arrives, once.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from vigil.platform.alerts.signing import verify

pytestmark = pytest.mark.slow

SECRET = "whsec_drill-secret-0123456789"
ADMIN = ("drill", "drill-password-1")
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


@dataclass
class Receiver:
    """On-call: what arrived, when, at which path; answers 503 while `down`, or at a
    path in `down_paths`."""

    down: bool = False
    down_paths: set[str] = field(default_factory=set)
    arrivals: list[tuple[float, str, dict[str, str], bytes]] = field(default_factory=list)

    def serve(self) -> tuple[ThreadingHTTPServer, int]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if receiver.down or self.path in receiver.down_paths:
                    self.send_response(503)
                else:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    receiver.arrivals.append((time.time(), self.path, headers, body))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, server.server_address[1]

    def at(self, path: str) -> list[dict[str, Any]]:
        return [json.loads(body) for _, p, _, body in list(self.arrivals) if p == path]

    def pages(self, path: str, status: str) -> list[dict[str, Any]]:
        """Page alerts in `status` at the path (Alertmanager groups a page with the
        ticket that may go with it, so each alert's own status counts)."""
        return [
            a
            for body in self.at(path)
            for a in body["alerts"]
            if a["labels"].get("alertname") == "VigilSLOBurn"
            and a["labels"]["severity"] == "page"
            and a["status"] == status
        ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory) -> Iterator[tuple[str, Receiver]]:  # type: ignore[no-untyped-def]
    binary = shutil.which("prometheus-alertmanager")
    assert binary, "ops/install.sh --test installs Debian's prometheus-alertmanager"
    receiver = Receiver()
    server, port = receiver.serve()
    folder = tmp_path_factory.mktemp("alertmanager")
    (folder / "am.yml").write_text(
        f"""
route:
  receiver: oncall
  group_by: [alertname, deployment]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: oncall
    webhook_configs:
      - url: http://127.0.0.1:{port}/via-alertmanager
        send_resolved: true
"""
    )
    am_port = _free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={folder / 'am.yml'}",
            f"--storage.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{am_port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "Alertmanager did not start"
            time.sleep(0.2)
        yield url, receiver
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        server.shutdown()


def admin(url: str, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(method, f"{url}/api/admin{path}", json=body, auth=ADMIN, timeout=30)


async def _load(url: str, seconds: float, concurrency: int) -> dict[str, int]:
    """Closed-loop chat requests, interactive and batch; counts answers by kind."""
    counts: dict[str, int] = {}
    stop = time.monotonic() + seconds

    async def one(client: httpx.AsyncClient, priority: str) -> None:
        while time.monotonic() < stop:
            r = await client.post(
                "/v1/chat/completions",
                json={"model": "chat", "messages": [{"role": "user", "content": "Hi there!"}]},
                headers={"x-vigil-priority": priority},
            )
            code = r.json()["error"]["code"] if r.status_code != 200 else None
            via = r.headers.get("x-vigil-fallback-from")
            kind = f"{priority}:{r.status_code}:{code or ('fallback' if via else 'chat')}"
            counts[kind] = counts.get(kind, 0) + 1
            if r.status_code != 200:
                await asyncio.sleep(0.05)

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        priorities = ["interactive"] * (concurrency - 1) + ["batch"]
        await asyncio.gather(*(one(client, p) for p in priorities))
    return counts


def in_order(arrivals: list[tuple[float, str, dict[str, str], bytes]], path: str) -> None:
    """Each alert (by fingerprint) that reached `path`: firing, resolved, firing, ...,
    never a resolve before its firing nor two of a kind in a row (each delivery once)."""
    seen: set[str] = set()
    statuses: dict[str, list[str]] = {}
    for _, p, headers, body in arrivals:
        delivery = headers.get("x-vigil-delivery", "")
        if p != path or delivery in seen:
            continue
        seen.add(delivery)
        for alert in json.loads(body)["alerts"]:
            statuses.setdefault(alert["fingerprint"], []).append(alert["status"])
    for fp, got in statuses.items():
        expected = ["firing", "resolved"] * len(got)
        assert got == expected[: len(got)], (fp, got)


def vigil_alerts_active(am_url: str) -> list[dict[str, Any]]:
    """Alertmanager's own view: its active alerts from Vigil."""
    alerts = httpx.get(f"{am_url}/api/v2/alerts", timeout=10).json()
    return [a for a in alerts if a["labels"].get("service") == "vigil"]


def _wait(condition: Any, what: str, timeout_s: float = 60.0) -> float:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < timeout_s, f"timed out waiting for {what}"
        time.sleep(0.2)
    return time.monotonic() - t0


def _outage(receiver: Receiver) -> None:
    """The direct receiver down for 21 s from 1 s after the first page reaches it:
    through the rest of the load and the first seconds after it, when firing and
    resolved messages pile up behind one another."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not receiver.pages("/direct", "firing"):
        time.sleep(0.05)
    time.sleep(1.0)
    receiver.down_paths.add("/direct")
    time.sleep(21.0)
    receiver.down_paths.discard("/direct")


def log_of(url: str) -> list[dict[str, Any]]:
    """The direct webhook's delivery attempts, newest first."""
    attempts: list[dict[str, Any]] = admin(
        url, "GET", "/webhooks/direct/deliveries?limit=1000"
    ).json()
    return attempts


def test_a_burning_slo_pages_sheds_falls_back_and_recovers(
    tmp_path_factory, launch_vigil, create_user, alertmanager
) -> None:  # type: ignore[no-untyped-def]
    am_url, receiver = alertmanager
    server, port = receiver.serve()
    data_dir: Path = tmp_path_factory.mktemp("drill")
    (data_dir / "vigil.toml").write_text(CONFIG)
    create_user(data_dir, *ADMIN, role="operator")
    flags = ["--config", str(data_dir / "vigil.toml"), "--max-num-seqs", "4"]
    with launch_vigil(data_dir, *flags) as vigil:
        url = vigil.base_url
        for name, hook, fmt in (
            ("direct", f"http://127.0.0.1:{port}/direct", "alertmanager_webhook"),
            ("alertmanager", f"{am_url}/api/v2/alerts", "alertmanager_api"),
        ):
            events = ["slo.burn", "slo.recovered", "shed", "fallback"]
            body = {"name": name, "url": hook, "secret": SECRET, "format": fmt, "events": events}
            created = admin(url, "POST", "/webhooks", body)
            assert created.status_code == 201, created.text
        t0 = time.time()
        outage = threading.Thread(target=_outage, args=(receiver,), daemon=True)
        outage.start()
        counts = asyncio.run(_load(url, seconds=14, concurrency=6))
        load_ended = time.time()

        pages = receiver.pages
        fired = pages("/direct", "firing")
        assert fired, (counts, receiver.arrivals)
        assert any(k.startswith("batch:429:overloaded_slo_burn") for k in counts), counts
        decided = [
            (d["at"][11:23], d["kind"], d["decision"], d["details"])
            for d in reversed(admin(url, "GET", "/decisions?deployment=chat").json())
        ]
        assert any(k.endswith(":fallback") for k in counts), (counts, decided)
        # Signed, and within 5 s of the alert's start.
        for _, path, headers, body in receiver.arrivals:
            if path == "/direct":
                assert verify(SECRET, headers["x-vigil-signature"], body, time.time())
        first = min(
            t
            for t, p, _, b in receiver.arrivals
            if p == "/direct" and fired[0]["fingerprint"].encode() in b
        )
        started = datetime.fromisoformat(fired[0]["startsAt"]).timestamp()
        assert first - started < 5.0, (first, fired[0]["startsAt"])
        _wait(lambda: pages("/via-alertmanager", "firing"), "the page through Alertmanager")
        # Load removed: the page resolves; the fallback and then the shedding end. The
        # direct receiver is back a few seconds after the load: what it missed is retried.
        _wait(lambda: pages("/direct", "resolved"), "the resolved page", 90)
        _wait(lambda: pages("/via-alertmanager", "resolved"), "Alertmanager's resolved", 30)

        def actions_off() -> bool:
            kinds = [(d["kind"], d["decision"]) for d in admin(url, "GET", "/decisions").json()]
            return ("shed_batch", "off") in kinds and ("fallback", "off") in kinds

        _wait(actions_off, "the actions to end", 40)
        decisions = list(reversed(admin(url, "GET", "/decisions?deployment=chat").json()))
        steps = [(d["kind"], d["decision"]) for d in decisions]
        wanted = [("alert", "fired"), ("shed_batch", "on"), ("fallback", "on")]
        wanted += [("fallback", "off"), ("shed_batch", "off")]
        for step in wanted:
            assert step in steps, steps
        assert steps.index(("shed_batch", "on")) < steps.index(("fallback", "on"))
        assert steps.index(("fallback", "off")) < steps.index(("shed_batch", "off"))
        shed_on = next(d for d in decisions if (d["kind"], d["decision"]) == ("shed_batch", "on"))
        # The numbers of a page rule's two windows, named by their real length, for each
        # SLI that burned (ttft, shed or both).
        for r in shed_on["details"].values():
            fast = r.get("burn_5s", 0) > 14.4 and r.get("burn_417ms", 0) > 14.4
            assert fast or (r.get("burn_30s", 0) > 6 and r.get("burn_2s500ms", 0) > 6), r
        # Once Vigil has resolved everything (the slow-burn ticket, the actions), so has
        # Alertmanager: no Vigil alert is left active there, nor owed to the receiver.
        _wait(lambda: not admin(url, "GET", "/alerts?state=firing").json(), "no firing", 90)
        _wait(lambda: not vigil_alerts_active(am_url), "Alertmanager to hold none", 60)
        outage.join(timeout=60)
        assert any(a["status_code"] == 503 for a in log_of(url)), "the outage held nothing"
        _wait(lambda: all(a["delivered"] for a in log_of(url)), "the backlog", 90)
        in_order(receiver.arrivals, "/direct")
        print(
            f"drill: load {load_ended - t0:.1f} s, {counts}; page delivered "
            f"{first - started:.2f} s after it fired"
        )
        # A delivery owed while the receiver is down survives a restart of Vigil.
        receiver.down = True
        test = admin(url, "POST", "/webhooks/direct/test")
        assert test.status_code == 202
        delivery_id = test.json()["delivery_id"]
        time.sleep(2)  # an attempt or two fails
    receiver.down = False
    with launch_vigil(data_dir, *flags) as vigil:
        _wait(
            lambda: any(
                h.get("x-vigil-delivery") == delivery_id for _, _, h, _ in receiver.arrivals
            ),
            "the owed delivery after the restart",
            60,
        )
        time.sleep(3)  # nothing more comes
        ids = [h.get("x-vigil-delivery") for _, p, h, _ in receiver.arrivals if p == "/direct"]
        assert len(ids) == len(set(ids)) and delivery_id in ids
        in_order(receiver.arrivals, "/direct")
        log = admin(vigil.base_url, "GET", "/webhooks/direct/deliveries").json()
        attempts = [a for a in log if a["delivery_id"] == delivery_id]
        assert attempts[0]["delivered"] and any(a["status_code"] == 503 for a in attempts)
    server.shutdown()
