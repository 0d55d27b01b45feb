"""Failed sign-ins are throttled per username and per address, in memory or shared by
several gateways through the real Redis on 127.0.0.1:6379."""

from __future__ import annotations

import uuid

from vigil.platform.gateway.throttle import (
    MAX_FAILURES_PER_ADDRESS,
    MAX_FAILURES_PER_USER,
    WINDOW_S,
    SignInThrottle,
)

REDIS = "async+redis://127.0.0.1:6379"


async def test_a_username_is_locked_after_its_failures_and_a_success_clears_it() -> None:
    throttle = SignInThrottle()
    for _ in range(MAX_FAILURES_PER_USER - 1):
        assert await throttle.failed("root", "10.0.0.1") == []
    await throttle.succeeded("root")  # the owner signs in: the count starts again
    for _ in range(MAX_FAILURES_PER_USER - 1):
        await throttle.failed("root", "10.0.0.2")
    assert await throttle.wait_s("root", "10.0.0.3") is None
    [lockout] = await throttle.failed("root", "10.0.0.2")
    assert (lockout.what, lockout.who, lockout.num_failures) == ("username", "root", 10)
    wait = await throttle.wait_s("root", "10.0.0.9")  # from anywhere
    assert wait is not None and 0 < wait <= WINDOW_S
    assert await throttle.wait_s("alice", "10.0.0.9") is None  # others are not held up


async def test_one_address_trying_many_usernames_is_locked_too() -> None:
    throttle = SignInThrottle()
    lockouts = [
        await throttle.failed(f"user{i}", "10.0.0.7") for i in range(MAX_FAILURES_PER_ADDRESS)
    ]
    assert [lo.what for lo in lockouts[-1]] == ["address"]
    assert await throttle.wait_s("someone-new", "10.0.0.7") is not None
    assert await throttle.wait_s("someone-new", "10.0.0.8") is None


async def test_gateways_sharing_redis_share_the_counts() -> None:
    username = f"root-{uuid.uuid4().hex[:8]}"  # the server is shared: a name of its own
    one, two = SignInThrottle(REDIS), SignInThrottle(REDIS)
    try:
        for i in range(MAX_FAILURES_PER_USER):
            await (one if i % 2 else two).failed(username, "10.1.0.1")
        assert await one.wait_s(username, "10.1.0.2") is not None
        assert await two.wait_s(username, "10.1.0.2") is not None
        await two.succeeded(username)
        assert await one.wait_s(username, "10.1.0.2") is None
    finally:
        await one.storage.reset()  # type: ignore[attr-defined]
