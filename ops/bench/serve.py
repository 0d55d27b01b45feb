"""`vigil serve` for the benchmarks: a real server on a free port with a fresh data dir."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def create_user(data_dir: Path, username: str, password: str, role: str) -> None:
    """A user in the data dir's database, made as an operator makes one (`vigil admin
    create`), with the `vigil` of this Python's virtual environment."""
    vigil = Path(sys.executable).with_name("vigil")
    create = ["admin", "create", "--username", username, "--role", role]
    subprocess.run(
        [str(vigil), *create, "--password-stdin", "--data-dir", str(data_dir)],
        input=password.encode(),
        check=True,
        capture_output=True,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def vigil_serve(
    *flags: str, workers: int = 1, timeout_s: float = 300, data_dir: Path | None = None
) -> Iterator[str]:
    """The server's base URL once /readyz says ready and `workers` workers report their
    engines (the first ready one makes /readyz 200); the server is stopped on exit."""
    with vigil_serve_process(*flags, workers=workers, timeout_s=timeout_s, data_dir=data_dir) as (
        base,
        _,
    ):
        yield base


@contextlib.contextmanager
def vigil_serve_process(
    *flags: str, workers: int = 1, timeout_s: float = 300, data_dir: Path | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`vigil_serve`, also giving the gateway's process (its workers are its children)."""
    port = free_port()
    vigil = Path(sys.executable).with_name("vigil")
    data = str(data_dir or tempfile.mkdtemp())
    cmd = [str(vigil), "serve", "--port", str(port), "--data-dir", data]
    proc = subprocess.Popen([*cmd, "--workers", str(workers), "--log-level", "warning", *flags])
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while not _ready(base, workers):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"vigil serve {' '.join(flags)}: not ready in {timeout_s} s")
            time.sleep(0.5)
        yield base, proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _ready(base: str, workers: int) -> bool:
    try:
        if httpx.get(f"{base}/readyz", timeout=1).status_code != 200:
            return False
        metrics = httpx.get(f"{base}/metrics", timeout=1).text.splitlines()
    except httpx.TransportError:
        return False
    engines = {
        line.split('replica="')[1].split('"')[0]
        for line in metrics
        if line.startswith("vigil_requests_running{")
    }
    return len(engines) >= workers
