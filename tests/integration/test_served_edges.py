"""Against one real `vigil serve` (keys mode, traces kept in memory, JSON logs), each
done as a user or an attacker would: a console session ends when an admin changes its
user's password, and "sign out everywhere" ends another browser's; a body nested 100k
deep is a 400 on the admin API as on /v1; a caller's traceparent joins the trace only
from a trusted peer (127.0.0.2 here) and is a link from a new trace otherwise; a stream
its client closed after the first token is logged and counted with its real prompt."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"
ROOT = ("root", "root-password-1")
OTTO = ("otto", "otto-password-1")  # an operator
VERA = ("vera", "vera-password-1")  # a viewer
TRUSTED_PEER = "127.0.0.2"  # loopback too: the test binds its client there
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.fixture(scope="module")
def server(tmp_path_factory, launch_vigil, create_user) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    data_dir = tmp_path_factory.mktemp("edges")
    for (name, password), role in ((ROOT, "admin"), (OTTO, "operator"), (VERA, "viewer")):
        create_user(data_dir, name, password, role=role)
    flags = ["--auth", "keys", MODEL, "--trace-buffer", "64"]
    flags += ["--trace-parent-from", TRUSTED_PEER, "--log-format", "json"]
    with launch_vigil(data_dir, *flags) as running:
        yield running


@pytest.fixture(scope="module")
def api_key(server: Any) -> str:
    r = httpx.post(
        f"{server.base_url}/api/admin/keys", json={"name": "edges"}, auth=ROOT, timeout=30
    )
    assert r.status_code == 201, r.text
    key: str = r.json()["key"]
    return key


def browser(server: Any, user: tuple[str, str]) -> httpx.Client:
    """A browser signed in to the console: its own cookies, the CSRF token from a page."""
    client = httpx.Client(base_url=server.base_url, timeout=30, follow_redirects=False)
    client.get("/console/login")
    form = {"username": user[0], "password": user[1], "_csrf_token": csrf(client)}
    signed_in = client.post("/console/login", data=form)
    assert signed_in.status_code == 303, signed_in.text
    assert client.get("/console/").status_code == 200
    return client


def csrf(client: httpx.Client) -> str:
    token = client.cookies.get("vigil_csrf")
    assert token, "no CSRF cookie: the console sets it on its pages"
    return token


def signed_out(client: httpx.Client) -> bool:
    """The next page is the sign-in form, and an htmx request is a 401."""
    page = client.get("/console/deployments")
    fragment = client.get("/console/deployments", headers={"hx-request": "true"})
    return (
        page.status_code == 303
        and page.headers["location"].startswith("/console/login")
        and fragment.status_code == 401
    )


def test_a_password_change_ends_the_users_console_sessions(server: Any) -> None:
    laptop, phone, other = browser(server, OTTO), browser(server, OTTO), browser(server, VERA)
    changed = httpx.patch(
        f"{server.base_url}/api/admin/users/otto",
        json={"password": "otto-password-2"},
        auth=ROOT,
        timeout=30,
    )
    assert changed.status_code == 200, changed.text
    assert signed_out(laptop) and signed_out(phone)
    assert other.get("/console/").status_code == 200  # another user's session stays
    browser(server, ("otto", "otto-password-2")).close()  # the new password signs in
    for client in (laptop, phone, other):
        client.close()


def test_sign_out_everywhere_ends_another_browsers_session(server: Any) -> None:
    here, there = browser(server, VERA), browser(server, VERA)
    ended = here.post("/console/logout-everywhere", data={"_csrf_token": csrf(here)})
    assert ended.status_code == 303 and ended.headers["location"] == "/console/login"
    assert signed_out(there) and signed_out(here)
    again = browser(server, VERA)  # an admin does it for a user over the admin API
    r = httpx.post(f"{server.base_url}/api/admin/users/vera/sign-out", auth=ROOT, timeout=30)
    assert r.status_code == 200 and signed_out(again)
    audit = httpx.get(
        f"{server.base_url}/api/admin/audit",
        params={"entity_type": "user", "entity_name": "vera"},
        auth=ROOT,
        timeout=30,
    ).json()
    assert [e["actor"] for e in audit if e["action"] == "user.sign_out_everywhere"][:2] == [
        "root",
        "vera",
    ]
    for client in (here, there, again):
        client.close()


@pytest.mark.parametrize(
    ("method", "path", "user"),
    [
        ("POST", "/api/admin/plan", VERA),  # any signed-in user reaches it
        ("PATCH", "/api/admin/users/vera", ROOT),
        ("POST", "/api/admin/webhooks", ROOT),
        ("PATCH", f"/api/admin/deployments/{MODEL}", ROOT),
    ],
)
def test_a_body_nested_100k_deep_is_a_400_on_the_admin_api(
    server: Any, method: str, path: str, user: tuple[str, str]
) -> None:
    r = httpx.request(
        method,
        f"{server.base_url}{path}",
        content=DEEP,
        headers={"content-type": "application/json"},
        auth=user,
        timeout=60,
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_json" and "nested too deeply" in error["message"]
    assert httpx.get(f"{server.base_url}/readyz", timeout=10).status_code == 200


def chat(
    server: Any, api_key: str, traceparent: str, local_address: str = "127.0.0.1"
) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=local_address)
    with httpx.Client(transport=transport, timeout=120) as client:
        return client.post(
            f"{server.base_url}/v1/chat/completions",
            json={
                "model": MODEL,
                "messages": [{"role": "user", "content": "Hi."}],
                "max_tokens": 1,
            },
            headers={"authorization": f"Bearer {api_key}", "traceparent": traceparent},
        )


def server_span(server: Any, trace_id: str) -> dict[str, Any]:
    r = httpx.get(f"{server.base_url}/api/admin/traces/{trace_id}", auth=VERA, timeout=30)
    assert r.status_code == 200, r.text
    [span] = [s for s in r.json()["spans"] if s["kind"] == "server"]
    return span


def test_a_key_holder_cannot_write_into_another_trace(server: Any, api_key: str) -> None:
    """Two callers naming the same trace: each gets a new trace of its own, linked to the
    span it named; the caller's trace holds nothing. A trusted peer's joins it."""
    parent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
    first, second = chat(server, api_key, parent), chat(server, api_key, parent)
    assert first.status_code == second.status_code == 200, first.text
    ids = {first.headers["x-vigil-trace-id"], second.headers["x-vigil-trace-id"]}
    assert len(ids) == 2 and CALLER_TRACE not in ids
    for trace_id in ids:
        span = server_span(server, trace_id)
        assert span["parent_span_id"] is None
        assert span["links"] == [{"trace_id": CALLER_TRACE, "span_id": CALLER_SPAN}]
    assert (
        httpx.get(f"{server.base_url}/api/admin/traces/{CALLER_TRACE}", auth=VERA).status_code
        == 404
    )
    joined = chat(server, api_key, parent, local_address=TRUSTED_PEER)
    assert joined.status_code == 200 and joined.headers["x-vigil-trace-id"] == CALLER_TRACE
    span = server_span(server, CALLER_TRACE)
    assert span["parent_span_id"] == CALLER_SPAN and span["links"] == []


def prompt_tokens_total(server: Any) -> float:
    text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    pattern = rf'^vigil_prompt_tokens_total\{{deployment="{MODEL}",[^}}]*\}} (\S+)$'
    return sum(float(m) for m in re.findall(pattern, text, re.MULTILINE))


def access_lines(server: Any) -> list[dict[str, Any]]:
    lines = []
    for raw in server.log_path.read_text().splitlines():
        if raw.startswith("{"):
            line = json.loads(raw)
            if line.get("logger") == "vigil.access":
                lines.append(line)
    return lines


def first_text(chunk: dict[str, Any]) -> str:
    return "".join(c["delta"].get("content") or "" for c in chunk.get("choices", []))


def test_a_stream_closed_after_its_first_token_logs_its_real_prompt(
    server: Any, api_key: str
) -> None:
    messages = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
    auth = {"authorization": f"Bearer {api_key}"}
    url = f"{server.base_url}/v1/chat/completions"
    whole = httpx.post(
        url, json={"model": MODEL, "messages": messages, "max_tokens": 1}, headers=auth, timeout=120
    )
    num_prompt = whole.json()["usage"]["prompt_tokens"]
    assert num_prompt > 10
    before = prompt_tokens_total(server)
    body = {"model": MODEL, "messages": messages, "max_tokens": 400, "stream": True}
    with httpx.stream("POST", url, json=body, headers=auth, timeout=120) as stream:
        request_id = stream.headers["x-request-id"]
        for line in stream.iter_lines():
            if line.startswith("data: {") and first_text(json.loads(line[6:])):
                break  # the first token: the client leaves
    deadline = time.monotonic() + 30
    while not (mine := [a for a in access_lines(server) if a.get("request_id") == request_id]):
        assert time.monotonic() < deadline, "no access line for the aborted stream"
        time.sleep(0.2)
    [line] = mine
    assert line["outcome"] == "abort" and line["prompt_tokens"] == num_prompt, line
    assert 1 <= line["output_tokens"] < 400
    assert prompt_tokens_total(server) - before == num_prompt
