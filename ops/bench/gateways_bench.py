"""Two gateways on one PostgreSQL, measured: how long a change made through one takes to
show on the other, and how long the SLO loop and webhook delivery are without an owner
when the gateway running them is killed.

    .venv/bin/python ops/bench/gateways_bench.py [--changes 10] [--kills 3]

A fresh database on the local PostgreSQL (dropped afterwards), two `vigil serve --workers
0` on 127.0.0.1 (no worker needed: the serving view and the key cache are the gateway's),
then:
1. Config change: a canary set through gateway A (weight 0), then dropped, --changes
   times each (after one untimed pair, once B is quiet again); timed from A's answer
   (the write has committed) to gateway B's /readyz listing the canary version, or no
   longer listing it.
2. Key revoke: a key used on B (so B has it cached), revoked through A; timed from A's
   answer to B's first 401.
3. Owner killed: the gateway whose vigil_loop_owner is 1 is killed (SIGKILL), timed to
   the other's vigil_loop_owner turning 1; the killed one is started again. --kills times.
Each prints n, p50 and max in seconds. The test tests/integration/test_gateways.py runs
the same parts with small counts, and asserts the bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx

PG = "postgres@127.0.0.1:5432"
ADMIN = ("bench-admin", "bench-admin-password-1")
WORKER_TOKEN = "gateways-bench-worker-token"
MODEL = "smollm2-135m-instruct"
CANARY = "warm"
VIGIL = Path(sys.executable).with_name("vigil")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def database(prefix: str = "vigil_gateways") -> Iterator[str]:
    """A fresh PostgreSQL database at the schema's head; its SQLAlchemy URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(f"postgresql://{PG}/postgres", timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    url = f"postgresql+asyncpg://{PG}/{name}"
    try:
        subprocess.run(
            [str(VIGIL), "migrate", "--database-url", url], check=True, capture_output=True
        )
        user = ["--username", ADMIN[0], "--role", "admin", "--password-stdin"]
        subprocess.run(
            [str(VIGIL), "admin", "create", *user, "--database-url", url],
            input=ADMIN[1],
            text=True,
            check=True,
            capture_output=True,
        )
        yield url
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> float:
    """Seconds until `condition` held (polled every 10 ms); fails after `timeout_s`."""
    t0 = time.monotonic()
    while not condition():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.01)
    return time.monotonic() - t0


def answers(call: Callable[[], httpx.Response]) -> httpx.Response | None:
    try:
        return call()
    except httpx.TransportError:
        return None


@dataclasses.dataclass
class Gateway:
    """One `vigil serve --workers 0` on 127.0.0.1, started and killed at will."""

    name: str
    database_url: str
    data_dir: Path
    flags: tuple[str, ...] = ()
    port: int = dataclasses.field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / f"{self.name}.log"

    def start(self) -> None:
        cmd = [str(VIGIL), "serve", "--workers", "0", "--port", str(self.port)]
        cmd += ["--data-dir", str(self.data_dir), "--database-url", self.database_url]
        cmd += [MODEL, "--torch-threads", "1", "--drain-delay", "0.1", *self.flags]
        env = {**os.environ, "VIGIL_WORKER_TOKEN": WORKER_TOKEN}
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while answers(lambda: httpx.get(f"{self.url}/healthz", timeout=2)) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"gateway {self.name} did not start:\n{self.log_tail()}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL: no drain, no goodbye; its database sessions end with the process."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def log_tail(self) -> str:
        return self.log_path.read_text()[-4000:] if self.log_path.exists() else ""

    def owner(self) -> bool:
        """Whether it runs the loops now (its vigil_loop_owner gauge)."""
        r = answers(lambda: httpx.get(f"{self.url}/metrics", timeout=2))
        return r is not None and "\nvigil_loop_owner 1.0" in r.text

    def versions(self) -> dict[str, str]:
        """The versions its serving view uses (from /readyz)."""
        r = answers(lambda: httpx.get(f"{self.url}/readyz", timeout=2))
        return r.json()["versions"] if r is not None else {}

    def admin(self, method: str, path: str, body: Any = None) -> httpx.Response:
        url = f"{self.url}/api/admin{path}"
        return httpx.request(method, url, json=body, auth=ADMIN, timeout=30)


@contextlib.contextmanager
def gateways(
    database_url: str, data_dir: Path, *flags: str, count: int = 2
) -> Iterator[list[Gateway]]:
    """`count` gateways on one database, started one after another (the first seeds it)."""
    started = [Gateway(chr(ord("a") + i), database_url, data_dir, flags) for i in range(count)]
    try:
        for gateway in started:
            gateway.start()
        yield started
    finally:
        for gateway in started:
            gateway.stop()


def register_canary(gateway: Gateway) -> None:
    body = {"version": CANARY, "artifact": f"bundled:{MODEL}"}
    r = gateway.admin("POST", f"/models/{MODEL}/versions", body)
    assert r.status_code in (201, 409), r.text


def settle(gateway: Gateway, timeout_s: float = 120.0) -> None:
    """Wait until the gateway answers at once again (five /healthz in a row under 200 ms),
    so that what is timed next is the change reaching it, not its own busy seconds."""
    quick = 0

    def quiet() -> bool:
        nonlocal quick
        t0 = time.monotonic()
        httpx.get(f"{gateway.url}/healthz", timeout=10)
        quick = quick + 1 if time.monotonic() - t0 < 0.2 else 0
        return quick >= 5

    wait_for(quiet, f"gateway {gateway.name} quiet", timeout_s)


def canary_changes(a: Gateway, b: Gateway, n: int) -> list[float]:
    """Seconds from A's answer to B's serving view showing the change, for n canaries
    set and n dropped. One more pair goes first, untimed: B loads the canary's tokenizer
    the first time it sees it (seconds of CPU, with the GIL, which slow its answers)."""
    key = f"{MODEL}@{CANARY}"
    seen: list[float] = []
    for i in range(n + 1):
        if i == 1:
            settle(b)
        r = a.admin("POST", f"/deployments/{MODEL}/canary", {"version": CANARY, "weight": 0})
        assert r.status_code == 200, r.text
        seen.append(wait_for(lambda: key in b.versions(), "the canary on B", 30))
        r = a.admin("POST", f"/deployments/{MODEL}/rollback")
        assert r.status_code == 200, r.text
        seen.append(wait_for(lambda: key not in b.versions(), "the canary gone on B", 30))
    return seen[2:]


def key_revokes(a: Gateway, b: Gateway, n: int) -> list[float]:
    """Seconds from A's answer to B refusing a key it has cached, n times."""
    seen = []
    for _ in range(n):
        name = f"revoked-{uuid.uuid4().hex[:8]}"
        created = a.admin("POST", "/keys", {"name": name})
        assert created.status_code == 201, created.text
        headers = {"Authorization": f"Bearer {created.json()['key']}"}
        assert httpx.get(f"{b.url}/v1/models", headers=headers).status_code == 200
        assert a.admin("POST", f"/keys/{name}/revoke").status_code == 200

        def refused(headers: dict[str, str] = headers) -> bool:
            return httpx.get(f"{b.url}/v1/models", headers=headers).status_code == 401

        seen.append(wait_for(refused, "the revoke on B", 30))
    return seen


def owner_kills(pair: list[Gateway], n: int) -> list[float]:
    """Seconds from killing the owner to the other owning, n times (restarting it)."""
    seen = []
    for _ in range(n):
        wait_for(lambda: sum(g.owner() for g in pair) == 1, "one owner", 30)
        [owner] = [g for g in pair if g.owner()]
        [other] = [g for g in pair if g is not owner]
        owner.kill()
        t0 = time.monotonic()
        wait_for(other.owner, "the other gateway to take the loops over", 30)
        seen.append(time.monotonic() - t0)
        owner.start()
    return seen


def row(what: str, seconds: list[float]) -> str:
    p50 = statistics.median(seconds)
    return f"{what:<36} {len(seconds):>3} {p50:>8.3f} {max(seconds):>8.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--kills", type=int, default=3)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as folder,
        database() as url,
        gateways(url, Path(folder)) as (a, b),
    ):
        register_canary(a)
        canary = canary_changes(a, b, args.changes)
        revokes = key_revokes(a, b, args.changes)
        kills = owner_kills([a, b], args.kills)
    print(f"{'seconds':<36} {'n':>3} {'p50':>8} {'max':>8}")
    print(row("canary set/dropped on A -> seen on B", canary))
    print(row("key revoked on A -> refused on B", revokes))
    print(row("owner killed -> other owns the loops", kills))


if __name__ == "__main__":
    main()
