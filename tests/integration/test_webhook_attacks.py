"""Attacks on outgoing webhooks against a real `vigil serve`, with receivers this test
runs on 127.0.0.1: a receiver that trickles its answer and one that never answers
beside a healthy one (the healthy one still gets its message at once, and each slow
attempt ends within --webhook-timeout); a receiver answering 500 with a 256 MB body
(the gateway reads 4 KB of it and its memory stays put); addresses that reach loopback
in disguise, refused at registration, and a name that resolves to loopback, refused at
delivery by a gateway that does not allow loopback; and webhook URLs with credentials
in them, shown whole to operators only.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

MODEL = "all-minilm-l6-v2"  # the smallest bundled model: the gateway is what is tested
OPS = ("ops", "ops-password-0123")
VERA = ("vera", "vera-password-0123")
TIMEOUT_S = 3.0  # --webhook-timeout
HUGE_BYTES = 256 << 20
CHUNK = b"x" * (64 << 10)


@dataclass
class Receivers:
    """HTTP receivers on one port, by path: /healthy answers 200; /trickle sends its
    status line one byte every 2 s; /hang reads the request and never answers; /huge
    answers 500 with a HUGE_BYTES body, generated as fast as the gateway reads it."""

    port: int = 0
    arrivals: list[tuple[float, str]] = field(default_factory=list)  # (time, path)
    huge_sent: int = 0
    _loop: asyncio.AbstractEventLoop | None = None

    def paths(self) -> list[str]:
        return [path for _, path in self.arrivals]

    def arrived(self, path: str) -> float | None:
        return next((t for t, p in self.arrivals if p.split("?")[0] == path), None)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            length = next(
                (
                    int(v)
                    for k, _, v in (h.partition(":") for h in lines[1:])
                    if k.lower() == "content-length"
                ),
                0,
            )
            await reader.readexactly(length)
            self.arrivals.append((time.monotonic(), path))
            route = path.split("?")[0]
            if route == "/trickle":
                for byte in b"HTTP/1.1 200 OK\r\n":
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(2.0)
            elif route == "/hang":
                await asyncio.sleep(3600)
            elif route == "/huge":
                writer.write(
                    b"HTTP/1.1 500 Internal Server Error\r\n"
                    + f"Content-Length: {HUGE_BYTES}\r\n\r\n".encode()
                )
                while self.huge_sent < HUGE_BYTES:
                    writer.write(CHUNK)
                    await writer.drain()
                    self.huge_sent += len(CHUNK)
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the gateway hung up: what is tested
        finally:
            writer.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[Receivers]:
        started = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
            self.port = server.sockets[0].getsockname()[1]
            started.set()
            loop.run_forever()
            server.close()
            handlers = asyncio.all_tasks(loop)
            for task in handlers:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*handlers, return_exceptions=True))
            loop.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        started.wait(10)
        try:
            yield self
        finally:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._loop.stop)
            thread.join(10)


def admin(
    url: str, method: str, path: str, body: Any = None, who: tuple[str, str] = OPS
) -> httpx.Response:
    return httpx.request(method, f"{url}/api/admin{path}", json=body, auth=who, timeout=30)


def register(url: str, name: str, hook: str) -> httpx.Response:
    return admin(url, "POST", "/webhooks", {"name": name, "url": hook, "events": ["slo.burn"]})


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def attempts(url: str, name: str) -> list[dict[str, Any]]:
    log: list[dict[str, Any]] = admin(url, "GET", f"/webhooks/{name}/deliveries").json()
    return log


def rss_bytes(pid: int, field_name: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field_name} for {pid}")


@pytest.fixture(scope="module")
def receivers() -> Iterator[Receivers]:
    with Receivers().running() as r:
        yield r


@pytest.fixture(scope="module")
def open_vigil(tmp_path_factory, launch_vigil, create_user):  # type: ignore[no-untyped-def]
    """Open mode on loopback, the local default: loopback receivers are allowed."""
    data_dir = tmp_path_factory.mktemp("webhooks-open")
    create_user(data_dir, *OPS, role="operator")
    create_user(data_dir, *VERA, role="viewer")
    flags = (MODEL, "--webhook-timeout", str(TIMEOUT_S))
    with launch_vigil(data_dir, *flags) as server:
        yield server


def test_a_slow_receiver_delays_only_its_own_messages(open_vigil, receivers: Receivers) -> None:  # type: ignore[no-untyped-def]
    url, port = open_vigil.base_url, receivers.port
    for name in ("trickle", "hang", "healthy"):
        assert register(url, name, f"http://127.0.0.1:{port}/{name}").status_code == 201
    for name in ("trickle", "hang"):
        assert admin(url, "POST", f"/webhooks/{name}/test").status_code == 202
    wait_for(lambda: receivers.arrived("/trickle") and receivers.arrived("/hang"), "both slow")
    t0 = time.monotonic()
    assert admin(url, "POST", "/webhooks/healthy/test").status_code == 202
    arrived = wait_for(lambda: receivers.arrived("/healthy"), "the healthy delivery", 20)
    assert arrived - t0 < 1.5, f"the healthy receiver waited {arrived - t0:.1f} s"
    # Each slow attempt is cut off at --webhook-timeout, trickling or not, and retried.
    for name in ("trickle", "hang"):
        [failed, *_] = wait_for(lambda name=name: attempts(url, name), f"{name}'s attempt", 20)
        assert failed["error"] == f"no answer within {TIMEOUT_S:g} s" and not failed["delivered"]
        assert TIMEOUT_S * 1000 - 100 < failed["latency_ms"] < TIMEOUT_S * 1000 + 1000
    assert [a["delivered"] for a in attempts(url, "healthy")] == [True]
    for name in ("trickle", "hang"):
        assert admin(url, "DELETE", f"/webhooks/{name}").status_code == 200


def test_a_huge_answer_is_not_read_into_the_gateway(open_vigil, receivers: Receivers) -> None:  # type: ignore[no-untyped-def]
    url, pid = open_vigil.base_url, open_vigil.pid
    assert register(url, "huge", f"http://127.0.0.1:{receivers.port}/huge").status_code == 201
    before = rss_bytes(pid)
    peak_before = rss_bytes(pid, "VmHWM")
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(rss_bytes(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        assert admin(url, "POST", "/webhooks/huge/test").status_code == 202
        [attempt] = wait_for(lambda: attempts(url, "huge"), "the huge answer's attempt", 20)
    finally:
        stop.set()
        sampler.join()
    assert attempt["status_code"] == 500 and not attempt["delivered"]
    assert attempt["error"] == "HTTP 500 Internal Server Error"  # the body is not kept
    grew = max(max(samples) - before, rss_bytes(pid, "VmHWM") - peak_before)
    assert grew < 32 << 20, f"the gateway grew by {grew >> 20} MB"
    assert receivers.huge_sent < 32 << 20, f"{receivers.huge_sent >> 20} MB were read"
    assert admin(url, "DELETE", "/webhooks/huge").status_code == 200


def test_loopback_in_disguise_is_refused_at_registration(open_vigil, receivers: Receivers) -> None:  # type: ignore[no-untyped-def]
    url, port = open_vigil.base_url, receivers.port
    for host in (
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "2130706433",
        "0x7f.1",
        "127.1",
        "[::ffff:169.254.169.254]",
        "[::ffff:a9fe:a9fe]",
        "100.100.100.200",
        "192.0.0.192",
        "10.0.0.1",
    ):
        r = register(url, "disguised", f"http://{host}:{port}/healthy?via={host}")
        assert r.status_code == 400, (host, r.text)
        error = r.json()["error"]
        assert error["code"] == "forbidden_address" and "--webhook-allow" in error["message"]
    assert not [p for p in receivers.paths() if "via=" in p]


def test_webhook_urls_are_shown_whole_to_operators_only(open_vigil, receivers: Receivers) -> None:  # type: ignore[no-untyped-def]
    url = open_vigil.base_url
    hook = f"http://pager:s3cret-pw@127.0.0.1:{receivers.port}/healthy/s3cret-path?token=s3cret"
    assert register(url, "secretive", hook).status_code == 201
    [mine] = [w for w in admin(url, "GET", "/webhooks").json() if w["name"] == "secretive"]
    assert mine["url"] == hook  # an operator sees it whole
    shown = {
        "the API to a viewer": admin(url, "GET", "/webhooks", who=VERA).text,
        "the audit log to a viewer": admin(url, "GET", "/audit", who=VERA).text,
        "the console to an anonymous reader": httpx.get(f"{url}/console/alerts").text,
    }
    for where, text in shown.items():
        assert "s3cret" not in text, where
    assert f"http://…@127.0.0.1:{receivers.port}/…" in shown["the API to a viewer"]
    assert admin(url, "DELETE", "/webhooks/secretive").status_code == 200


def test_a_name_resolving_to_loopback_is_refused_when_it_is_called(
    tmp_path_factory, launch_vigil, create_user, receivers: Receivers
) -> None:  # type: ignore[no-untyped-def]
    """With keys (loopback is not allowed), `localhost` passes registration (a name is
    checked where it resolves to, when it is called) and is refused at delivery."""
    data_dir = tmp_path_factory.mktemp("webhooks-keys")
    create_user(data_dir, *OPS, role="operator")
    flags = (MODEL, "--auth", "keys", "--webhook-timeout", str(TIMEOUT_S))
    with launch_vigil(data_dir, *flags) as server:
        url, port = server.base_url, receivers.port
        assert register(url, "direct", f"http://127.0.0.1:{port}/healthy").status_code == 400
        assert register(url, "named", f"http://localhost:{port}/healthy?by=name").status_code == 201
        assert admin(url, "POST", "/webhooks/named/test").status_code == 202
        [attempt] = wait_for(lambda: attempts(url, "named"), "the refused attempt", 20)
    assert not attempt["delivered"] and attempt["status_code"] is None
    assert (
        attempt["error"].startswith("refused: localhost resolves to")
        and "loopback" in attempt["error"]
    )
    assert not [p for p in receivers.paths() if "by=name" in p]
