"""The console in Debian's Chromium against a real `vigil serve --auth keys`, tracing on
by default: an operator finds a slow request in the Traces list (filtered in place by
its duration), opens its waterfall and reads the time it spent behind other sequences,
and finds it again by its request id; then, with a canary taking half the traffic, the
overview draws a line per version. The screenshots are the README's."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MODEL = "smollm2-135m-instruct"
OPERATOR = ("tess", "tess-password-1")
DOCS = Path(__file__).resolve().parents[2] / "web" / "docs"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, create_user) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("console-traces-e2e")
    create_user(path, *OPERATOR, role="operator")
    return Path(path)


@pytest.fixture(scope="module")
def server(data_dir: Path, api_key: str, launch_vigil) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    # No --trace-buffer: traces are kept by default.
    with launch_vigil(data_dir, "--auth", "keys", MODEL, "--kv-cache-memory", "96MiB") as s:
        yield s


def complete(base_url: str, api_key: str, max_tokens: int, prompt: str = "Hello") -> httpx.Response:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
    headers = {"authorization": f"Bearer {api_key}"}
    r = httpx.post(f"{base_url}/v1/completions", json=body, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    return r


def sign_in(page: Page, base_url: str, path: str) -> None:
    page.goto(f"{base_url}{path}")
    page.fill("input[name=username]", OPERATOR[0])
    page.fill("input[name=password]", OPERATOR[1])
    page.click("#login-form button[type=submit]")
    expect(page.locator("#signed-in-as")).to_contain_text(OPERATOR[0])


def test_an_operator_opens_a_slow_requests_waterfall_from_the_traces_list(
    server: Any, api_key: str, page: Page
) -> None:
    base = server.base_url
    # One long request and eight short ones at once: the long one shares its engine
    # steps with the others, and is the slow one.
    with ThreadPoolExecutor(9) as pool:
        started = time.monotonic()
        slow = pool.submit(complete, base, api_key, 96, "Tell me about the sea.")
        shorts = [pool.submit(complete, base, api_key, 12) for _ in range(8)]
        slow_r = slow.result()
        slow_ms = (time.monotonic() - started) * 1000
        assert all(s.result().status_code == 200 for s in shorts)
    request_id, trace_id = slow_r.headers["x-request-id"], slow_r.headers["x-vigil-trace-id"]

    sign_in(page, base, "/console/traces")
    expect(page.locator("h1")).to_have_text("Traces")
    expect(page.locator("#trace-rows tr.trace-row")).to_have_count(9, timeout=10_000)
    page.screenshot(path=str(DOCS / "console-traces.png"), full_page=True)
    # Filtered in place (htmx) to the requests at least half as slow as the slow one.
    page.fill("#filter-min-duration", str(int(slow_ms / 2)))
    page.click("#trace-filters button[type=submit]")
    row = page.locator(f'#trace-rows tr.trace-row[data-trace-id="{trace_id}"]')
    expect(row).to_be_visible()
    expect(page).to_have_url(re.compile(r"min_duration_ms=\d+"))  # the filter in the URL
    assert page.locator("#trace-rows tr.trace-row").count() < 9

    row.locator("a.trace-link").click()
    expect(page).to_have_url(f"{base}/console/traces/{trace_id}")
    for span in ("admission", "queue", "prefill", "decode"):
        expect(page.locator(f'#waterfall tr[data-span="{span}"]')).to_have_count(1)
    prefill = page.locator('#waterfall tr[data-span="prefill"]')
    expect(prefill).to_contain_text("prompt tokens cached")
    expect(page.locator('#waterfall tr[data-span="decode"]')).to_contain_text(
        "behind other sequences"
    )
    expect(page.locator("#waited-behind")).to_contain_text("waiting behind other sequences")
    assert page.locator("#waterfall .seg-shared").count() >= 1
    page.screenshot(path=str(DOCS / "console-waterfall.png"), full_page=True)

    # The same trace found by the request id its caller reported.
    page.goto(f"{base}/console/traces")
    page.fill("#lookup-request-id", request_id)
    page.click("#trace-lookup button[type=submit]")
    expect(page).to_have_url(f"{base}/console/traces/{trace_id}")


def ready(base_url: str, key: str) -> bool:
    found = httpx.get(f"{base_url}/readyz", timeout=10).json()

    def walk(value: Any) -> bool:
        if isinstance(value, dict):
            return value.get(key) == "ready" or any(walk(v) for v in value.values())
        return isinstance(value, list) and any(walk(v) for v in value)

    return walk(found)


def test_the_overview_draws_a_line_per_version_during_a_canary(
    server: Any, api_key: str, page: Page
) -> None:
    base = server.base_url
    admin = httpx.Client(base_url=f"{base}/api/admin", auth=OPERATOR, timeout=60)
    r = admin.post(
        f"/models/{MODEL}/versions",
        json={"version": "next", "artifact": f"bundled:{MODEL}"},
    )
    assert r.status_code == 201, r.text
    r = admin.post(f"/deployments/{MODEL}/canary", json={"version": "next", "weight": 0})
    assert r.status_code in (200, 201), r.text
    deadline = time.monotonic() + 180
    while not ready(base, f"{MODEL}@next"):
        assert time.monotonic() < deadline, "the canary never loaded"
        time.sleep(0.5)
    # The control plane hears of the load with the worker's next record write: retried.
    while True:
        r = admin.post(f"/deployments/{MODEL}/canary", json={"version": "next", "weight": 50})
        if r.status_code != 409 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.status_code in (200, 201), r.text

    sign_in(page, base, "/console/")
    lines = f"window.vigilLive[{MODEL!r}].data"
    page.wait_for_function(f"{lines} !== undefined", timeout=10_000)
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            complete(base, api_key, 4)

    workers = [threading.Thread(target=traffic) for _ in range(2)]
    for w in workers:
        w.start()
    try:
        # requests: 1 stable served/s, 6 canary served/s; ttft: 3 stable p99, 4 canary p99.
        for chart, i in (("requests", 1), ("requests", 6), ("ttft", 3), ("ttft", 4)):
            page.wait_for_function(f"{lines}.{chart}[{i}].some((v) => v > 0)", timeout=60_000)
        legend = page.locator(f'#live-{MODEL} [data-chart="ttft"]')
        expect(legend).to_contain_text("stable TTFT p99")
        expect(legend).to_contain_text("canary TTFT p99")
        # Give the lines a few seconds to draw side by side, then keep the picture.
        first = page.evaluate(f"{lines}.requests[0].length")
        page.wait_for_function(f"{lines}.requests[0].length >= {first + 5}", timeout=30_000)
        page.locator(f"#live-{MODEL}").screenshot(path=str(DOCS / "console-overview-versions.png"))
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=120)
        admin.close()
