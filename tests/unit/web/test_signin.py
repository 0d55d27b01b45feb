"""Signing in to the console: sessions, expiry, sign-out, CSRF, roles and throttling."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from consoles import PASSWORD, Console

from vigil.platform.control.access.records import Role
from vigil.platform.gateway.throttle import SignInLimits

MAX_FAILURES_PER_USER = SignInLimits().max_failures_per_user


async def test_signing_in_starts_a_session_under_a_new_id(console: Console) -> None:
    await console.client.get("/console/login")
    console.client.cookies.set(
        "vigil_session", "planted-by-someone-else", domain="testserver.local", path="/console"
    )
    answer = await console.sign_in("otto")
    assert answer.status_code == 303 and answer.headers["location"] == "/console/"
    session_id = console.client.cookies.get("vigil_session")
    assert session_id and session_id != "planted-by-someone-else"
    page = await console.get("/console/")
    assert page.status_code == 200 and "otto · operator" in page.text


async def test_a_wrong_password_is_refused_on_the_form(console: Console) -> None:
    answer = await console.sign_in("otto", "wrong password")
    assert answer.status_code == 401
    assert "Wrong username or password" in answer.text
    assert not console.client.cookies.get("vigil_session")


async def test_sign_in_goes_back_to_the_page_asked_for_but_never_off_the_console(
    console: Console,
) -> None:
    await console.client.get("/console/login")
    for target, expected in [
        ("/console/audit", "/console/audit"),
        ("https://evil.example/console/", "/console/"),
        ("//evil.example/console/", "/console/"),
    ]:
        answer = await console.client.post(
            "/console/login",
            data={
                "username": "vera",
                "password": PASSWORD,
                "next": target,
                "_csrf_token": console.csrf(),
            },
        )
        assert answer.headers["location"] == expected


async def test_signing_out_ends_the_session_in_the_database(console: Console) -> None:
    await console.sign_in("otto")
    session_id = console.client.cookies.get("vigil_session")
    assert await console.services.plane.sessions.get(session_id) is not None
    answer = await console.client.post("/console/logout", data={"_csrf_token": console.csrf()})
    assert answer.status_code == 303 and answer.headers["location"] == "/console/login"
    assert await console.services.plane.sessions.get(session_id) is None
    # The old cookie, replayed, is nobody.
    console.client.cookies.set(
        "vigil_session", session_id, domain="testserver.local", path="/console"
    )
    page = await console.get("/console/")
    assert "read only" in page.text


async def test_a_session_expires_after_its_idle_time(make_console: Any) -> None:
    async with make_console(auth="keys", console_session_s=600) as console:
        await console.sign_in("vera")
        assert (await console.get("/console/")).status_code == 200
        sessions = console.services.plane.sessions
        now = sessions.clock()
        sessions.clock = lambda: now + timedelta(seconds=599)
        assert (await console.get("/console/")).status_code == 200  # and renewed for 600 s
        sessions.clock = lambda: now + timedelta(seconds=599 + 601)
        answer = await console.get("/console/")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/console/login?next=/console/"


async def test_keys_mode_shows_nothing_without_a_session(make_console: Any) -> None:
    async with make_console(auth="keys") as console:
        page = await console.get("/console/")
        assert page.status_code == 303 and page.headers["location"].startswith("/console/login")
        for path in ("/console/deployments", "/console/audit", "/console/workers"):
            assert (await console.get(path)).status_code == 303
        stream = await console.client.get(
            "/console/stream", headers={"accept": "text/event-stream"}
        )
        assert stream.status_code == 401
        htmx = await console.client.get("/console/deployments", headers={"hx-request": "true"})
        assert htmx.status_code == 401 and htmx.headers["hx-redirect"] == "/console/login"
        assert (await console.get("/console/login")).status_code == 200


async def test_open_mode_on_loopback_reads_without_a_session_but_writes_need_one(
    console: Console,
) -> None:
    page = await console.get("/console/")
    assert page.status_code == 200 and "read only" in page.text
    await console.client.get("/console/login")
    answer = await console.post("/console/deployments/smollm2-135m-instruct/rollback")
    assert answer.status_code == 401


async def test_a_post_without_the_csrf_token_is_refused(console: Console) -> None:
    await console.sign_in("otto")
    answer = await console.client.post(
        "/console/deployments/smollm2-135m-instruct/rollback", headers={"hx-request": "true"}
    )
    assert answer.status_code == 403 and "CSRF" in answer.text
    forged = await console.client.post(
        "/console/deployments/smollm2-135m-instruct/rollback",
        headers={"hx-request": "true", "x-csrftoken": "made-up"},
    )
    assert forged.status_code == 403


async def test_a_cross_site_post_is_refused_even_with_the_token(console: Console) -> None:
    await console.sign_in("otto")
    answer = await console.post(
        "/console/deployments/smollm2-135m-instruct/rollback",
        origin="https://evil.example",
    )
    assert answer.status_code == 403 and "another site" in answer.text
    answer = await console.post(
        "/console/deployments/smollm2-135m-instruct/rollback", **{"sec-fetch-site": "cross-site"}
    )
    assert answer.status_code == 403


async def test_a_disabled_user_is_signed_out_at_the_next_request(make_console: Any) -> None:
    async with make_console(auth="keys") as console:
        await console.sign_in("otto")
        assert (await console.get("/console/")).status_code == 200
        await console.services.plane.users.disable("otto", actor="ada")
        assert (await console.get("/console/")).status_code == 303


async def test_failed_sign_ins_are_throttled_per_username(console: Console) -> None:
    for _ in range(MAX_FAILURES_PER_USER):
        assert (await console.sign_in("otto", "guess")).status_code == 401
    locked = await console.sign_in("otto", PASSWORD)  # even the right password, now
    assert locked.status_code == 429 and int(locked.headers["retry-after"]) > 0
    assert "Too many failed sign-ins" in locked.text
    entries = await console.services.plane.audit.list("user", "otto")
    assert any(e.action == "sign_in.locked_out" for e in entries)


async def test_failed_sign_ins_are_throttled_per_address(console: Console) -> None:
    throttle = console.services.sign_ins
    for i in range(throttle.limits.max_failures_per_address):
        await throttle.reserve(f"user-{i}", "testclient")  # slots never given back: failures
    assert (await console.sign_in("vera")).status_code == 429


async def test_sign_in_and_out_are_in_the_audit_log(console: Console) -> None:
    await console.sign_in("vera")
    await console.client.post("/console/logout", data={"_csrf_token": console.csrf()})
    actions = [e.action for e in await console.services.plane.audit.list("user", "vera")]
    assert actions[:2] == ["user.sign_out", "user.sign_in"]


async def browser(console: Console, username: str) -> str:
    return await browser_as(console, username, PASSWORD)


async def browser_as(console: Console, username: str, password: str) -> str:
    """Sign in as another browser would (no cookie of the last one): its session id."""
    if console.client.cookies.get("vigil_session"):
        console.client.cookies.delete("vigil_session", domain="testserver.local", path="/console")
    assert (await console.sign_in(username, password)).status_code == 303
    session_id = console.client.cookies.get("vigil_session")
    assert session_id
    return session_id


async def page_in(console: Console, session_id: str) -> int:
    console.client.cookies.set(
        "vigil_session", session_id, domain="testserver.local", path="/console"
    )
    status: int = (await console.get("/console/")).status_code
    return status


async def test_a_password_change_ends_every_session_of_that_user(make_console: Any) -> None:
    async with make_console(auth="keys") as console:
        laptop, phone, other = [await browser(console, u) for u in ("otto", "otto", "vera")]
        assert [await page_in(console, s) for s in (laptop, phone, other)] == [200, 200, 200]
        await console.services.plane.users.update("otto", password="a new password", actor="ada")
        assert [await page_in(console, s) for s in (laptop, phone, other)] == [303, 303, 200]
        assert await console.services.plane.sessions.expires_in_s(laptop) is None  # deleted
        entries = await console.services.plane.audit.list("user", "otto")
        assert entries[0].after == {
            "username": "otto",
            "role": "operator",
            "disabled": False,
            "password_changed": True,
            "sessions_ended": True,
        }
        assert (await console.sign_in("otto", PASSWORD)).status_code == 401  # the old one
        assert await page_in(console, await browser_as(console, "otto", "a new password")) == 200


async def test_sign_out_everywhere_ends_the_other_browsers_sessions(console: Console) -> None:
    laptop, phone = await browser(console, "otto"), await browser(console, "otto")
    ended = await console.client.post(
        "/console/logout-everywhere", data={"_csrf_token": console.csrf()}
    )
    assert ended.status_code == 303 and ended.headers["location"] == "/console/login"
    for session_id in (laptop, phone):  # open mode: each reads on, as nobody
        assert await page_in(console, session_id) == 200
        assert 'id="signed-in-as"' not in (await console.get("/console/")).text
        assert await console.services.plane.sessions.expires_in_s(session_id) is None
    actions = [e.action for e in await console.services.plane.audit.list("user", "otto")]
    assert actions[0] == "user.sign_out_everywhere"


async def test_a_user_enabled_again_gets_no_old_session_back(make_console: Any) -> None:
    async with make_console(auth="keys") as console:
        session = await browser(console, "otto")
        users = console.services.plane.users
        await users.disable("otto", actor="ada")
        await users.update("otto", disabled=False, actor="ada")  # before the session's next click
        assert await page_in(console, session) == 303


async def test_a_role_change_keeps_the_session_with_the_new_role(make_console: Any) -> None:
    async with make_console(auth="keys") as console:
        session = await browser(console, "otto")
        await console.services.plane.users.set_role("otto", Role.VIEWER, actor="ada")
        assert await page_in(console, session) == 200
        assert "otto · viewer" in (await console.get("/console/")).text


async def test_signing_in_again_after_sign_out_everywhere_starts_a_working_session(
    console: Console,
) -> None:
    await browser(console, "otto")  # its password check is remembered a while
    await console.client.post("/console/logout-everywhere", data={"_csrf_token": console.csrf()})
    assert await page_in(console, await browser(console, "otto")) == 200
    assert "otto · operator" in (await console.get("/console/")).text
