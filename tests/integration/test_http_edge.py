"""The gateway's HTTP edge under attack, on a real `vigil serve`, over raw loopback
sockets: oversized and endless request heads, slow and idle clients, too many
connections, a client that leaves mid-body, a body over the limit read by urllib, a
credential in a query string, forged forwarded headers, and `kill -TERM` of the
whole process group."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

EMBEDDER = "all-minilm-l6-v2"
HEADER_TIMEOUT_S = 3.0
BODY_TIMEOUT_S = 4.0
KEEPALIVE_TIMEOUT_S = 2.0
MAX_CONNECTIONS = 8
EDGE_FLAGS = (
    EMBEDDER,
    "--header-timeout",
    str(HEADER_TIMEOUT_S),
    "--body-timeout",
    str(BODY_TIMEOUT_S),
    "--keepalive-timeout",
    str(KEEPALIVE_TIMEOUT_S),
    "--max-connections",
    str(MAX_CONNECTIONS),
)
SLACK_S = 2.0  # a deadline's check, the loop's scheduling, this test's polling


@pytest.fixture(scope="module")
def edge(launch_vigil, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Default header limits and proxy trust (none), short timeouts, 8 connections."""
    with launch_vigil(tmp_path_factory.mktemp("edge"), *EDGE_FLAGS) as server:
        yield server


@pytest.fixture(scope="module")
def proxied(launch_vigil, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Behind a TLS-terminating proxy on loopback, which it is told to trust."""
    with launch_vigil(
        tmp_path_factory.mktemp("proxied"),
        EMBEDDER,
        "--forwarded-allow-ips",
        "127.0.0.1",
    ) as server:
        yield server


def address(server: Any) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").split(":")
    return host, int(port)


@contextlib.contextmanager
def connect(server: Any, timeout_s: float = 30.0) -> Iterator[socket.socket]:
    with socket.create_connection(address(server), timeout=timeout_s) as sock:
        yield sock


def read_answer(sock: socket.socket) -> tuple[int, bytes]:
    """The status and body of one HTTP answer (it must say its length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before an answer: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed mid-answer"
        body += chunk
    return int(head.split(b" ")[1]), body


def closed_after_s(sock: socket.socket, limit_s: float) -> float:
    """Seconds until the server closes `sock` (reading and dropping what it sends)."""
    start = time.monotonic()
    sock.settimeout(limit_s)
    with contextlib.suppress(ConnectionResetError):
        while sock.recv(65536):
            pass
    return time.monotonic() - start


def rss_bytes(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def log_after(server: Any, mark: int) -> str:
    time.sleep(0.5)  # the access line is written once the answer is done
    return server.log_path.read_text()[mark:]


def mark(server: Any) -> int:
    return len(server.log_path.read_text())


# ---- header limits


def test_a_2_mb_header_gets_431(edge) -> None:
    with connect(edge) as sock:
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * (2 << 20) + b"\r\n\r\n"
        )
        status, body = read_answer(sock)
    assert status == 431
    assert "65536 bytes" in json.loads(body)["error"]["message"]


def test_5000_header_lines_get_431_by_count_and_by_size(edge) -> None:
    short = b"".join(b"X-H%d: v\r\n" % i for i in range(5000))  # 50 KB: under the size bound
    long = b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 900) for i in range(5000))  # 4.5 MB
    for lines in (short, long):
        with connect(edge) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n" + lines + b"\r\n")
            status, body = read_answer(sock)
        assert status == 431, body
        assert "100 header lines" in json.loads(body)["error"]["message"]
    assert httpx.get(f"{edge.base_url}/healthz", headers={"X-A": "1"}).status_code == 200


def test_unfinished_16_mb_heads_on_8_connections_are_cut_without_growing_memory(edge) -> None:
    before = rss_bytes(edge.pid)
    socks = [socket.create_connection(address(edge), timeout=30) for _ in range(8)]
    try:
        for sock in socks:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: ")
        for _ in range(256):  # 16 MB on each, never ending the header
            for sock in socks:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    sock.sendall(b"a" * 65536)
        grown = rss_bytes(edge.pid) - before
        for sock in socks:
            assert read_answer(sock)[0] == 431
    finally:
        for sock in socks:
            sock.close()
    assert grown < 16 << 20, f"the gateway grew by {grown >> 20} MB"


# ---- slow and idle clients


def test_slowloris_is_cut_within_the_header_timeout(edge) -> None:
    with connect(edge) as sock:
        start = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n")
        sock.settimeout(0.05)
        answer = b""
        while time.monotonic() - start < HEADER_TIMEOUT_S + SLACK_S + 5:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(b"X")  # a header that never ends, a byte at a time
            with contextlib.suppress(TimeoutError):
                chunk = sock.recv(4096)
                answer += chunk
                if not chunk:
                    break
            time.sleep(0.5)
        held_s = time.monotonic() - start
    assert held_s < HEADER_TIMEOUT_S + SLACK_S, f"held {held_s:.1f} s"
    assert answer.startswith(b"HTTP/1.1 408"), answer


def test_a_connection_that_sends_nothing_is_closed_within_the_header_timeout(edge) -> None:
    with connect(edge) as sock:
        held_s = closed_after_s(sock, HEADER_TIMEOUT_S + 10)
    assert HEADER_TIMEOUT_S - 0.5 < held_s < HEADER_TIMEOUT_S + SLACK_S


def test_an_idle_keep_alive_connection_is_closed(edge) -> None:
    with connect(edge) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
        assert read_answer(sock)[0] == 200
        held_s = closed_after_s(sock, KEEPALIVE_TIMEOUT_S + 10)
    assert held_s < KEEPALIVE_TIMEOUT_S + SLACK_S


def test_a_body_that_stops_arriving_gets_408(edge) -> None:
    with connect(edge) as sock:
        start = time.monotonic()
        sock.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"model": '
        )
        status, _ = read_answer(sock)
        held_s = time.monotonic() - start
    assert status == 408
    assert held_s < BODY_TIMEOUT_S + SLACK_S


def test_connections_over_the_bound_get_503(edge) -> None:
    # The worker's own connection counts too: MAX_CONNECTIONS held here is over the bound.
    held = [socket.create_connection(address(edge), timeout=10) for _ in range(MAX_CONNECTIONS)]
    try:
        with connect(edge) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
            status, _ = read_answer(sock)
    finally:
        for sock in held:
            sock.close()
    assert status == 503
    deadline = time.monotonic() + 5
    while httpx.get(f"{edge.base_url}/healthz").status_code != 200:
        assert time.monotonic() < deadline, "still refused once the connections closed"
        time.sleep(0.2)


# ---- a client that leaves, a body over the limit


def test_a_client_that_leaves_mid_body_is_a_499_not_a_server_error(edge) -> None:
    at = mark(edge)
    with connect(edge) as sock:
        sock.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"model": '
        )
        time.sleep(0.3)
    log = log_after(edge, at)
    assert "path=/v1/embeddings status=499" in log, log
    assert " ERROR " not in log and "status=500" not in log, log


def test_urllib_reads_the_413_of_a_9_mb_body(edge) -> None:
    body = json.dumps({"model": EMBEDDER, "input": ["word " * 2000] * 900}).encode()
    assert len(body) > 9_000_000
    request = urllib.request.Request(
        f"{edge.base_url}/v1/embeddings", data=body, headers={"content-type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 413
    assert "larger than" in json.loads(refused.value.read())["error"]["message"]


# ---- the access log, forwarded headers, cookies


def test_one_access_line_without_the_query_string(edge) -> None:
    at = mark(edge)
    assert httpx.get(f"{edge.base_url}/v1/models?api_key=sk-not-for-logs").status_code == 200
    log = log_after(edge, at)
    assert "sk-not-for-logs" not in log
    assert log.count("path=/v1/models ") == 1, log
    assert '"GET /v1/models' not in log  # uvicorn's own access line is off


def test_forwarded_headers_of_an_untrusted_peer_are_ignored(edge) -> None:
    at = mark(edge)
    headers = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}
    r = httpx.get(f"{edge.base_url}/console/login", headers=headers)
    assert r.status_code == 200
    log = log_after(edge, at)
    assert "client=127.0.0.1" in log and "203.0.113.9" not in log, log
    cookies = r.headers.get_list("set-cookie")
    assert cookies and not any("secure" in c.lower() for c in cookies), cookies
    assert "strict-transport-security" not in r.headers
    assert r.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]


def test_a_trusted_proxy_sets_the_client_address_and_https(proxied) -> None:
    at = mark(proxied)
    headers = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}
    r = httpx.get(f"{proxied.base_url}/console/login", headers=headers)
    assert r.status_code == 200
    assert "client=203.0.113.9" in log_after(proxied, at)
    cookies = r.headers.get_list("set-cookie")
    assert cookies and all(c.endswith("; Secure") for c in cookies), cookies
    assert r.headers["strict-transport-security"].startswith("max-age=")
    plain = httpx.get(f"{proxied.base_url}/console/login")  # the proxy's plain-HTTP side
    assert not any("secure" in c.lower() for c in plain.headers.get_list("set-cookie"))
    assert "strict-transport-security" not in plain.headers


# ---- kill -TERM of the process group


def test_sigterm_to_the_process_group_stops_all_without_restarting_a_worker(tmp_path) -> None:
    vigil = pathlib.Path(sys.executable).with_name("vigil")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = tmp_path / "server.log"
    cmd = [str(vigil), "serve", "--port", str(port), "--data-dir", str(tmp_path)]
    cmd += ["--torch-threads", "1", EMBEDDER, "--drain-delay", "2"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            time.sleep(0.3)
        worker_pid = int(
            re.search(r"started worker local-0 \(pid (\d+)\)", log_path.read_text())[1]
        )  # type: ignore[index]
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)  # what a container runtime does
        proc.wait(timeout=30)
        stopped_s = time.monotonic() - start
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    text = log_path.read_text()
    assert "restarting in" not in text and text.count("started worker") == 1, text
    assert stopped_s < 15, f"stopped in {stopped_s:.1f} s"
    with pytest.raises(ProcessLookupError):
        os.kill(worker_pid, 0)
