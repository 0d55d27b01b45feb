"""The console in Debian's Chromium against a real `vigil serve --auth keys`: an operator
signs in, registers a version, loads it as a canary, gives it 10% of the traffic through
the confirm step, watches the canary's share of the requests arrive in the overview's
chart, finds the change in the audit log, promotes through the review step and rolls
the promotion back; an audit entry reads as the field it changed; a viewer gets no
write controls and a forged write is refused; "sign out everywhere" in one browser signs
out another; without a session nothing is shown, and on a host open to the network that
holds without --auth."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from vigil.platform.control.specs import bundled_version

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MODEL = "smollm2-135m-instruct"
BUNDLED_KEY = bundled_version(MODEL).key
DOCS = Path(__file__).resolve().parents[2] / "web" / "docs"  # the README's screenshots
OPERATOR = ("otto", "otto-password-1")
VIEWER = ("vera", "vera-password-1")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, create_user) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("console-e2e")
    create_user(path, *OPERATOR, role="operator")
    create_user(path, *VIEWER, role="viewer")
    return Path(path)


@pytest.fixture(scope="module")
def server(data_dir: Path, api_key: str, launch_vigil) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    flags = ["--auth", "keys", MODEL, "--kv-cache-memory", "96MiB"]
    with launch_vigil(data_dir, *flags) as s:
        yield s


def send_requests(base_url: str, api_key: str, count: int) -> None:
    """`count` short completions, two at a time."""
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 2, "temperature": 0}
    headers = {"authorization": f"Bearer {api_key}"}

    def one(_: int) -> int:
        r = httpx.post(f"{base_url}/v1/completions", json=body, headers=headers, timeout=60)
        return r.status_code

    with ThreadPoolExecutor(2) as pool:
        assert set(pool.map(one, range(count))) == {200}


def sign_in(page: Page, base_url: str, user: tuple[str, str], path: str = "/console/") -> None:
    page.goto(f"{base_url}{path}")
    expect(page).to_have_url(f"{base_url}/console/login?next={path}")
    page.fill("input[name=username]", user[0])
    page.fill("input[name=password]", user[1])
    page.click("#login-form button[type=submit]")
    expect(page.locator("#signed-in-as")).to_contain_text(user[0])


def set_canary(page: Page, version: str, weight: int) -> None:
    card = page.locator(f"#deployment-{MODEL}")
    card.locator("select.canary-version").select_option(version)
    card.locator("input.canary-weight-input").fill(str(weight))
    card.locator("button.review-canary").click()
    expect(card.locator(".canary-confirm")).to_contain_text(f"{weight}%")
    card.locator("button.confirm-canary").click()


def test_an_operator_rolls_out_a_canary_from_the_console(
    server: Any, api_key: str, page: Page, output_path: str
) -> None:
    base = server.base_url
    sign_in(page, base, OPERATOR, "/console/versions")
    page.fill("#register-version input[name=version]", "warm")
    page.fill("#register-version input[name=artifact]", f"bundled:{MODEL}")
    page.fill("#register-version input[name=temperature]", "0.2")
    page.click("#register-version button[type=submit]")
    expect(page.locator("#flash")).to_contain_text(f"Registered {MODEL}@warm")

    # Load it as a canary with no traffic; the workers load it.
    page.goto(f"{base}/console/deployments")
    set_canary(page, "warm", 0)
    card = page.locator(f"#deployment-{MODEL}")
    expect(card.locator(".canary")).to_contain_text(f"{MODEL}@warm")
    page.goto(f"{base}/console/versions")
    row = page.locator(f'tr[data-key="{MODEL}@warm"]')
    expect(row.locator("td").nth(5)).to_contain_text("ready", timeout=120_000)

    # 10% of the traffic, through the confirm step.
    page.goto(f"{base}/console/deployments")
    set_canary(page, "warm", 10)
    expect(card.locator(".canary-weight")).to_have_text("10%")
    expect(page.locator("#flash")).to_contain_text("10% of requests to")
    page.screenshot(path=str(Path(output_path) / "console-deployments.png"), full_page=True)

    # Traffic: the overview's requests chart shows the canary's share arrive.
    page.goto(f"{base}/console/")
    canary_line = f"window.vigilLive[{MODEL!r}].data.requests[6]"
    page.wait_for_function(f"{canary_line} !== undefined", timeout=10_000)
    assert page.evaluate(f"{canary_line}.filter((v) => v > 0).length") == 0
    traffic = threading.Thread(target=send_requests, args=(base, api_key, 30))
    traffic.start()
    try:
        page.wait_for_function(f"{canary_line}.some((v) => v > 0)", timeout=60_000)
        served = f"window.vigilLive[{MODEL!r}].data.requests[1]"
        assert page.evaluate(f"{served}.reduce((a, v) => a + (v || 0), 0)") > 0
        page.screenshot(path=str(Path(output_path) / "console-canary.png"), full_page=True)
    finally:
        traffic.join(timeout=120)

    # The audit log says who did it.
    page.goto(f"{base}/console/audit")
    page.select_option("#audit-filters select[name=entity_type]", "deployment")
    entry = page.locator("#audit-rows tr.audit-entry").first
    expect(entry).to_contain_text("deployment.canary")
    expect(entry.locator("tr", has_text="canary_weight").locator("td.diff-after")).to_have_text(
        "10"
    )
    expect(entry).to_contain_text(OPERATOR[0])
    page.screenshot(path=str(Path(output_path) / "console-audit.png"), full_page=True)

    # Promote, through the in-page review (no native dialog: one would fail the test).
    page.goto(f"{base}/console/deployments")
    page.once("dialog", lambda dialog: pytest.fail(f"a native dialog: {dialog.message}"))
    card.locator("button.promote").click()
    review = card.locator(".promote-review")
    expect(review.locator(".review-to")).to_have_text(f"{MODEL}@warm")
    review.locator("button.confirm-promote").click()
    expect(card.locator(".stable")).to_have_text(f"{MODEL}@warm")
    expect(card.locator(".canary")).to_have_text("none")

    # Roll back, with no canary left: the review names the stable version the promotion
    # replaced, and confirming puts it back.
    card.locator("button.rollback").click()
    review = card.locator(".rollback-review")
    expect(review.locator(".review-from")).to_have_text(f"{MODEL}@warm")
    expect(review.locator(".review-to")).to_have_text(BUNDLED_KEY)
    expect(review).to_contain_text("restores the stable version of revision")
    expect(review.locator("table.review-slis tbody tr")).not_to_have_count(0)
    page.screenshot(path=str(DOCS / "console-rollback.png"), full_page=True)
    review.locator("button.confirm-rollback").click()
    expect(card.locator(".stable")).to_have_text(BUNDLED_KEY)
    expect(page.locator("#flash")).to_contain_text("previous stable version serves again")
    history = httpx.get(
        f"{base}/api/admin/deployments/{MODEL}/history", auth=OPERATOR, timeout=30
    ).json()
    assert [h["action"] for h in history[:2]] == ["deployment.rollback", "deployment.promote"]


def test_an_operator_reads_what_an_audit_entry_changed(server: Any, page: Page) -> None:
    """Retiring a version changes one field: the audit row shows that one, before and
    after, and the whole record opens below it, inside the card."""
    base = server.base_url
    sign_in(page, base, OPERATOR, "/console/versions")
    page.fill("#register-version input[name=version]", "audited")
    page.fill("#register-version input[name=artifact]", f"bundled:{MODEL}")
    page.fill("#register-version input[name=max_tokens]", "32")
    page.fill("#register-version textarea[name=stop]", "###")
    page.click("#register-version button[type=submit]")
    expect(page.locator("#flash")).to_contain_text(f"Registered {MODEL}@audited")
    page.once("dialog", lambda dialog: dialog.accept())  # retiring still asks the browser
    page.locator(f'tr[data-key="{MODEL}@audited"] button.retire').click()
    expect(page.locator("#flash")).to_contain_text(f"Retired {MODEL}@audited")

    page.goto(f"{base}/console/audit")
    page.select_option("#audit-filters select[name=entity_type]", "version")
    page.fill("#audit-filters input[name=action]", "version.retire")
    page.click("#audit-filters button[type=submit]")
    entry = page.locator("#audit-rows tr.audit-entry").first
    expect(entry).to_contain_text(f"{MODEL}@audited")
    expect(entry.locator("td.diff-field")).to_have_text(["status"])  # only what changed
    expect(entry.locator("td.diff-before")).to_have_text("registered")
    expect(entry.locator("td.diff-after")).to_have_text("retired")
    whole = entry.locator("details.whole-record")
    expect(whole.locator("pre").first).not_to_be_visible()
    whole.locator("summary").click()
    expect(whole.locator("pre").last).to_be_visible()
    expect(whole.locator("pre").last).to_contain_text('"max_tokens": 32')
    panel = page.locator("section.panel")
    assert panel.evaluate("(e) => e.scrollWidth <= e.clientWidth"), "the table overflows"
    page.screenshot(path=str(DOCS / "console-audit-diff.png"), full_page=True)


def test_a_viewer_has_no_write_controls_and_a_forged_write_is_refused(
    server: Any, page: Page, output_path: str
) -> None:
    base = server.base_url
    sign_in(page, base, VIEWER, "/console/deployments")
    expect(page.locator(f"#deployment-{MODEL}")).to_be_visible()
    expect(page.locator("form.canary-form")).to_have_count(0)
    expect(page.locator("button.promote")).to_have_count(0)
    page.screenshot(path=str(Path(output_path) / "console-viewer.png"), full_page=True)
    # The page's own token, sent by hand: the role still decides.
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "vigil_csrf")
    forged = page.request.post(
        f"{base}/console/deployments/{MODEL}/rollback",
        headers={"x-csrftoken": token, "hx-request": "true"},
    )
    assert forged.status == 403
    # Without the token, even an operator's session would be refused.
    no_token = page.request.post(f"{base}/console/deployments/{MODEL}/rollback")
    assert no_token.status == 403


def test_without_a_session_the_console_shows_nothing(server: Any) -> None:
    base = server.base_url
    page = httpx.get(f"{base}/console/", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/console/login?next=/console/"
    stream = httpx.get(f"{base}/console/stream", headers={"accept": "text/event-stream"})
    assert stream.status_code == 401


def test_sign_out_everywhere_signs_out_the_other_browser(server: Any, browser: Any) -> None:
    base = server.base_url
    here, there = browser.new_context().new_page(), browser.new_context().new_page()
    sign_in(here, base, VIEWER)
    sign_in(there, base, VIEWER)
    here.click("#sign-out-everywhere")
    expect(here).to_have_url(f"{base}/console/login")
    there.goto(f"{base}/console/deployments")
    expect(there).to_have_url(f"{base}/console/login?next=/console/deployments")
    expect(there.locator("#login-form")).to_be_visible()
    for page in (here, there):
        page.context.close()


def test_failed_sign_ins_are_throttled_in_the_form(server: Any, page: Page) -> None:
    base = server.base_url
    page.goto(f"{base}/console/login")
    for _ in range(10):
        page.fill("input[name=username]", "mallory")
        page.fill("input[name=password]", "a guess")
        page.click("#login-form button[type=submit]")
        expect(page.locator("#login-error")).to_contain_text("Wrong username or password")
    page.fill("input[name=username]", "mallory")
    page.fill("input[name=password]", "another guess")
    page.click("#login-form button[type=submit]")
    expect(page.locator("#login-error")).to_contain_text("Too many failed sign-ins")


def test_on_a_network_host_the_console_needs_a_session(
    tmp_path_factory, launch_vigil, page: Page
) -> None:  # type: ignore[no-untyped-def]
    """`--host 0.0.0.0` with no --auth: keys mode, so the browser lands on sign-in."""
    data_dir = tmp_path_factory.mktemp("console-network-host")
    with launch_vigil(data_dir, "--host", "0.0.0.0", "all-minilm-l6-v2") as s:
        page.goto(f"{s.base_url}/console/deployments")
        expect(page).to_have_url(f"{s.base_url}/console/login?next=/console/deployments")
        expect(page.locator("#login-form")).to_be_visible()
        stream = httpx.get(f"{s.base_url}/console/stream", headers={"accept": "text/event-stream"})
        assert stream.status_code == 401
