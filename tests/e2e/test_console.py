"""The console's overview in Debian's Chromium: live numbers and charts move while a
request streams."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MODEL = "smollm2-135m-instruct"


def test_overview_updates_while_a_request_streams(vigil_server, page: Page, output_path) -> None:
    page.goto(f"{vigil_server.base_url}/console/")
    expect(page.locator("h1")).to_have_text("Overview")
    expect(page.locator("#model-versions")).to_contain_text("smollm2-135m-instruct")
    expect(page.locator("#model-states")).to_contain_text("ready")
    requests_before = int(page.locator("#stat-requests").inner_text())

    body = {
        "model": "smollm2-135m-instruct",
        "stream": True,
        "max_tokens": 200,
        "ignore_eos": True,
        "temperature": 0,
        "messages": [{"role": "user", "content": "Write a poem about the sea."}],
    }

    def stream() -> None:
        with httpx.stream(
            "POST", f"{vigil_server.base_url}/v1/chat/completions", json=body, timeout=120
        ) as r:
            for _ in r.iter_lines():
                pass

    worker = threading.Thread(target=stream)
    worker.start()
    try:
        # While it streams: one running sequence and a non-zero output rate on screen.
        expect(page.locator("#stat-running")).to_have_text("1", timeout=20_000)
        expect(page.locator("#stat-tokens-per-s")).not_to_have_text("0.0", timeout=10_000)
        expect(page.locator("#stat-kv-usage")).not_to_have_text("0.0%")
        # The deployment's tokens/s chart: its newest point moves off zero, and on.
        newest = f"window.vigilLive[{MODEL!r}].data.tokens[1].at(-1)"
        page.wait_for_function(f"{newest} > 0", timeout=10_000)
        first_ts = page.evaluate(f"window.vigilLive[{MODEL!r}].data.tokens[0].at(-1)")
        page.wait_for_function(
            f"window.vigilLive[{MODEL!r}].data.tokens[0].at(-1) > {first_ts}", timeout=5_000
        )
        page.screenshot(path=str(Path(output_path) / "console-streaming.png"), full_page=True)
    finally:
        worker.join(timeout=120)
    # After it ends: the count of served requests moved and TTFT percentiles show.
    expect(page.locator("#stat-requests")).not_to_have_text(str(requests_before), timeout=10_000)
    expect(page.locator("#stat-ttft-p50")).not_to_have_text("–")
    expect(page.locator("#stat-running")).to_have_text("0", timeout=10_000)
