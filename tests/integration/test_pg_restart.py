"""PostgreSQL restarted, then down for a while, under a real `vigil serve` running
completions (with an API key) and admin writes: no 500s; completions go on from the last
known view; admin writes answer 503 with Retry-After while the database is away; every
acknowledged write is there afterwards; the connection pool recovers by itself.

The server is the test's own (tests/pg_cluster.py), never the shared one on 5432.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from pg_cluster import PgCluster, pg_cluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

MODEL = "smollm2-135m-instruct"
ADMIN = ("ops", "correct-horse-battery")
# Down long enough to outlast every few-second window on the way (the key cache, the
# replica writes, Retry-After): nothing in that path changes with more time down, the
# pool only keeps failing its connects at once (the port is closed).
DOWN_S = 12.0
VIGIL = str(Path(sys.executable).with_name("vigil"))
# Targets a busy machine meets: what is tested is the database, not admission's shedding.
CONFIG = f"""
[[deployments]]
name = "{MODEL}"
model = "{MODEL}"
slo = {{ ttft_p99_s = 60.0, min_tokens_per_s = 0.01 }}
"""


@dataclass
class Outcome:
    ts: float
    status: int
    retry_after: str | None = None
    name: str | None = None  # the webhook a write made


@dataclass
class Traffic:
    url: str
    key: str
    completions: list[Outcome] = field(default_factory=list)
    writes: list[Outcome] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def complete(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        body = {"model": MODEL, "prompt": "Hello", "max_tokens": 2}
        with httpx.Client(base_url=self.url, headers=headers, timeout=60) as client:
            while not self.stop.is_set():
                r = client.post("/v1/completions", json=body)
                self.completions.append(Outcome(time.monotonic(), r.status_code))
                time.sleep(0.05)

    def write(self) -> None:
        with httpx.Client(base_url=self.url, auth=ADMIN, timeout=30) as client:
            n = 0
            while not self.stop.is_set():
                n += 1
                name = f"hook-{n}"
                body = {"name": name, "url": "http://127.0.0.1:9/", "events": ["slo.burn"]}
                r = client.post("/api/admin/webhooks/", json=body)
                retry = r.headers.get("retry-after")
                self.writes.append(Outcome(time.monotonic(), r.status_code, retry, name))
                time.sleep(0.1)

    @contextlib.contextmanager
    def running(self) -> Iterator[Traffic]:
        threads = [threading.Thread(target=f, daemon=True) for f in (self.complete, self.write)]
        for t in threads:
            t.start()
        try:
            yield self
        finally:
            self.stop.set()
            for t in threads:
                t.join(60)

    def written_after(self, ts: float) -> float:
        """When the first write after `ts` was acknowledged (waits up to 60 s)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = [w.ts for w in self.writes if w.ts > ts and w.status == 201]
            if done:
                return done[0]
            time.sleep(0.05)
        raise AssertionError(f"no write acknowledged in 60 s: {self.writes[-5:]}")


def vigil(*args: str) -> str:
    done = subprocess.run(
        [VIGIL, *args], check=True, capture_output=True, text=True, input=ADMIN[1]
    )
    return done.stdout


def prepare(pg: PgCluster) -> str:
    """The schema, an admin and an API key, made the way an operator makes them."""
    db = ("--database-url", pg.url)
    vigil("migrate", *db)
    vigil("admin", "create", "--username", ADMIN[0], "--password-stdin", *db)
    made = vigil("keys", "create", "--name", "load", *db)
    return next(w for w in made.split() if w.startswith("vgl_"))


def test_postgres_restarted_and_down_costs_no_500_and_no_acknowledged_write(
    tmp_path: Path, launch_vigil
) -> None:  # type: ignore[no-untyped-def]
    with pg_cluster() as pg:
        key = prepare(pg)
        (tmp_path / "vigil.toml").write_text(CONFIG)
        flags = ("--database-url", pg.url, "--auth", "keys", MODEL)
        flags += ("--webhook-allow", "127.0.0.1")  # its webhooks point at 127.0.0.1:9
        flags += ("--config", str(tmp_path / "vigil.toml"))
        with launch_vigil(tmp_path, *flags) as server:
            with Traffic(server.base_url, key).running() as traffic:
                traffic.written_after(time.monotonic())
                restart_ts = time.monotonic()
                pg.restart()
                restarted_s = traffic.written_after(restart_ts) - restart_ts
                stop_ts = time.monotonic()
                pg.stop("immediate")  # a crash: no checkpoint, recovery from the WAL
                time.sleep(DOWN_S)
                start_ts = time.monotonic()
                pg.start()
                recovered_s = traffic.written_after(start_ts) - start_ts
                time.sleep(1.0)
            # Read back through the same server: its pool recovered without a restart.
            with httpx.Client(base_url=server.base_url, auth=ADMIN, timeout=30) as client:
                listed = client.get("/api/admin/webhooks/")
    refused = [w for w in traffic.writes if w.status == 503]
    first_503_ts = min((w.ts for w in refused if w.ts > stop_ts), default=float("nan"))
    print(
        f"\nrestart -> writes acknowledged again: {restarted_s:.2f} s"
        f"\ndown -> first 503: {first_503_ts - stop_ts:.2f} s; {len(refused)} writes refused"
        f"\nup again -> writes acknowledged again: {recovered_s:.2f} s"
        f"\ncompletions: {sum(c.status == 200 for c in traffic.completions)} served, "
        f"{sum(c.status == 429 for c in traffic.completions)} shed; "
        f"writes tried: {len(traffic.writes)}"
    )
    # Serving never stopped (429: admission shedding on a busy machine), nothing was a 500.
    assert {c.status for c in traffic.completions} <= {200, 429}, traffic.completions
    served = [c for c in traffic.completions if stop_ts < c.ts < start_ts and c.status == 200]
    assert served, "no completion was served while the database was down"
    assert {w.status for w in traffic.writes} <= {201, 503}, traffic.writes
    # While it was down, writes were refused with a time to retry in.
    assert refused and all(w.retry_after is not None for w in refused), refused
    assert any(stop_ts < w.ts < start_ts for w in refused)
    # Every acknowledged write is there.
    assert listed.status_code == 200, listed.text
    names = {w["name"] for w in listed.json()}
    acknowledged = {w.name for w in traffic.writes if w.status == 201}
    assert acknowledged <= names, acknowledged - names
