"""Attacks on the sign-in throttle of a real `vigil serve`, each from addresses of its own
on 127.0.0.0/8 (the server sees each as a different client): a parallel burst of wrong
passwords, locking a known user out, and flooding the audit log with lockouts."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from vigil.platform.gateway.throttle import SignInLimits

pytestmark = pytest.mark.slow

ROOT = ("root", "root password 1")
ADMIN = ("ada", "ada password 1")  # reads the audit log from an address nobody attacks
ALICE = ("alice", "alice password 1")
PROM = ("prom", "prom password 1")  # what a monitoring script signs in with
CAROL = ("carol", "carol password 1")
SIGNED_IN = "/api/admin/audit?limit=1"  # any role reads it
LIMITS = SignInLimits()


@pytest.fixture(scope="module")
def server(tmp_path_factory, launch_vigil, create_user) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    data_dir = tmp_path_factory.mktemp("sign-in-attacks")
    users = [(ROOT, "admin"), (ADMIN, "admin"), (ALICE, "viewer"), (PROM, "viewer")]
    for (username, password), role in [*users, (CAROL, "operator")]:
        create_user(data_dir, username, password, role=role)
    with launch_vigil(data_dir, "all-minilm-l6-v2") as s:
        yield s


def client(server: Any, address: str) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=server.base_url, transport=transport, timeout=30)


def sign_in(server: Any, address: str, username: str, password: str) -> int:
    with client(server, address) as c:
        return c.get(SIGNED_IN, auth=(username, password)).status_code


def console_sign_in(server: Any, address: str, username: str, password: str) -> int:
    """The console's sign-in form, as a browser at `address` sends it."""
    with client(server, address) as c:
        c.get("/console/login")
        form = {"username": username, "password": password, "_csrf_token": c.cookies["vigil_csrf"]}
        return c.post("/console/login", data=form).status_code


def lockouts(server: Any, since: int = 0) -> list[dict[str, Any]]:
    """The lockout entries of the audit log, oldest first, past the first `since`."""
    with client(server, "127.0.0.250") as c:
        entries = c.get(
            "/api/admin/audit", params={"entity_type": "user", "limit": 1000}, auth=ADMIN
        )
    assert entries.status_code == 200, entries.text
    return [e for e in reversed(entries.json()) if e["action"] == "sign_in.locked_out"][since:]


async def burst(server: Any, address: str, credentials: list[tuple[str, str]]) -> Counter[int]:
    """Every sign-in at once, each on a connection of its own."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    limits = httpx.Limits(max_connections=len(credentials))
    async with httpx.AsyncClient(
        base_url=server.base_url, transport=transport, limits=limits, timeout=60
    ) as c:
        answers = await asyncio.gather(*(c.get(SIGNED_IN, auth=auth) for auth in credentials))
    return Counter(a.status_code for a in answers)


def test_a_parallel_burst_of_wrong_passwords_checks_at_most_the_limit(server: Any) -> None:
    before = len(lockouts(server))
    codes = asyncio.run(burst(server, "127.0.0.2", [("root", f"guess {i}") for i in range(100)]))
    new = lockouts(server, before)
    assert (codes[401], len(new)) == (LIMITS.max_failures_per_user, 1), (codes, new)
    assert codes[429] == 100 - LIMITS.max_failures_per_user, codes
    assert new[0]["after"] == {"username": "root", "failures": LIMITS.max_failures_per_user}


def test_bad_passwords_for_a_user_do_not_lock_it_out_of_a_clean_address(server: Any) -> None:
    attacker, num = "127.0.0.3", LIMITS.max_failures_per_user
    codes = [sign_in(server, attacker, "prom", f"guess {i}") for i in range(num + 2)]
    assert codes == [401] * num + [429] * 2, codes
    assert sign_in(server, attacker, *PROM) == 429  # the attacker stays throttled
    assert console_sign_in(server, attacker, *PROM) == 429
    assert sign_in(server, "127.0.0.4", *PROM) == 200  # the real user, from its own address
    assert sign_in(server, "127.0.0.4", *PROM) == 200
    assert console_sign_in(server, "127.0.0.4", *PROM) == 303


def test_failures_from_one_shared_address_lock_only_that_address(server: Any) -> None:
    shared = "127.0.0.5"
    num_carol = LIMITS.max_failures_per_user
    guesses = [("carol", f"guess {i}") for i in range(num_carol)]
    guesses += [(f"user{i}", "guess") for i in range(LIMITS.max_failures_per_address - num_carol)]
    codes = [sign_in(server, shared, *guess) for guess in guesses]
    assert set(codes) == {401}, codes
    assert sign_in(server, shared, "nobody", "guess") == 429  # the address is throttled now
    assert sign_in(server, shared, *ALICE) == 429
    assert sign_in(server, "127.0.0.6", *CAROL) == 200
    assert sign_in(server, "127.0.0.6", *ALICE) == 200


def test_a_burst_for_unknown_users_writes_one_lockout_for_its_address(server: Any) -> None:
    before = len(lockouts(server))
    names = [(f"ghost{i % 10}", "guess") for i in range(100)]
    codes = asyncio.run(burst(server, "127.0.0.7", names))
    new = lockouts(server, before)
    assert (codes[401], len(new)) == (LIMITS.max_failures_per_address, 1), (codes, new)
    assert new[0]["after"]["address"] == "127.0.0.7"
    assert new[0]["after"]["failures"] == LIMITS.max_failures_per_address
