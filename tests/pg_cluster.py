"""A PostgreSQL server of a test's own (initdb into a fresh folder, its own port), which
the test may restart or stop at will; the shared server on 5432 is never touched.

PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    assert found, "PostgreSQL's server programs are missing (apt-get install postgresql)"
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class PgCluster:
    data: Path
    port: int
    bin: Path

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        cmd = [str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.data / "log")]
        _run([*cmd, "-o", options, "-w", "-t", "60", *args])

    def start(self) -> None:
        self.ctl("start")

    def stop(self, mode: str = "fast") -> None:
        """`immediate`: the server dies without a checkpoint, as in a crash."""
        self.ctl("-m", mode, "stop")

    def restart(self) -> None:
        self.ctl("-m", "fast", "restart")


def _run(cmd: list[str]) -> None:
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@contextlib.contextmanager
def pg_cluster() -> Iterator[PgCluster]:
    home = Path(tempfile.mkdtemp(prefix="vigil-pg-"))
    if os.geteuid() == 0:
        shutil.chown(home, "postgres", "postgres")
    cluster = PgCluster(home / "data", _free_port(), pg_bin())
    try:
        initdb = [str(cluster.bin / "initdb"), "-D", str(cluster.data), "-A", "trust", "-N"]
        _run([*initdb, "-U", "postgres"])
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            cluster.stop("immediate")
        shutil.rmtree(home, ignore_errors=True)
