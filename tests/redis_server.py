"""A private `redis-server` on a port of its own, for the tests of counts shared through
Redis (the shared one on 6379 is never touched): it can be stopped and started again on
the same port, as an outage and a recovery look to a gateway."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

REDIS_SERVER = "/usr/bin/redis-server"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = _free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self._proc is None, "already running"
        cmd = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1"]
        cmd += ["--save", "", "--appendonly", "no", "--dir", str(self.folder)]
        with open(self.folder / "redis.log", "ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not self._answers():
            assert self._proc.poll() is None, (self.folder / "redis.log").read_text()
            assert time.monotonic() < deadline, "redis-server did not answer in 10 s"
            time.sleep(0.05)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()  # as a crash looks: no goodbye to the clients
            self._proc.wait(timeout=10)
            self._proc = None

    def command(self, *args: str) -> str:
        """One command through redis-cli; its answer."""
        cli = ["redis-cli", "-h", "127.0.0.1", "-p", str(self.port), *args]
        return subprocess.run(cli, capture_output=True, text=True, check=True, timeout=10).stdout

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False
