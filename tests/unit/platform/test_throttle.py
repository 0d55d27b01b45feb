"""Failed sign-ins are throttled per address, and per username for the addresses that
failed for it; slots are taken before the password is checked, so parallel attempts
check at most the limit. In memory, and shared by several gateways through a private
Redis."""

from __future__ import annotations

import asyncio

from redis_server import PrivateRedis

from vigil.platform.gateway.shared_counts import SharedCounts
from vigil.platform.gateway.throttle import (
    Attempt,
    Held,
    Lockout,
    Refusal,
    SignInLimits,
    SignInThrottle,
    keys_for,
    seconds_until,
)

LIMITS = SignInLimits()


async def fail(throttle: SignInThrottle, username: str, address: str) -> Attempt:
    """An attempt whose password turned out wrong: its slots stay taken."""
    attempt = await throttle.reserve(username, address)
    assert isinstance(attempt, Attempt), attempt
    return attempt


async def succeed(throttle: SignInThrottle, username: str, address: str) -> None:
    attempt = await throttle.reserve(username, address)
    assert isinstance(attempt, Attempt), attempt
    await throttle.succeeded(attempt)


async def test_a_username_is_locked_only_for_the_addresses_that_failed_for_it() -> None:
    throttle = SignInThrottle()
    attempts = [
        await fail(throttle, "root", "10.0.0.1") for _ in range(LIMITS.max_failures_per_user)
    ]
    assert [a.lockouts for a in attempts[:-1]] == [()] * (LIMITS.max_failures_per_user - 1)
    assert attempts[-1].lockouts == (Lockout(Held.USERNAME, "root", LIMITS.max_failures_per_user),)
    refused = await throttle.reserve("root", "10.0.0.1")
    assert isinstance(refused, Refusal) and refused.what is Held.USERNAME
    assert 0 < refused.retry_after_s <= LIMITS.window_s
    await succeed(throttle, "root", "10.0.0.2")  # the owner, from an address of theirs
    await succeed(throttle, "root", "10.0.0.2")  # again: a right password frees its slot
    assert (await fail(throttle, "root", "10.0.0.3")).lockouts == ()  # one try elsewhere
    assert isinstance(await throttle.reserve("root", "10.0.0.3"), Refusal)
    await succeed(throttle, "alice", "10.0.0.1")  # other users are not held up


async def test_one_address_trying_many_usernames_is_locked_for_all_of_them() -> None:
    throttle = SignInThrottle()
    num = LIMITS.max_failures_per_address
    attempts = [await fail(throttle, f"user{i}", "10.0.0.7") for i in range(num)]
    assert attempts[-1].lockouts == (Lockout(Held.ADDRESS, "10.0.0.7", num),)
    refused = await throttle.reserve("someone-new", "10.0.0.7")
    assert isinstance(refused, Refusal) and refused.what is Held.ADDRESS
    await succeed(throttle, "someone-new", "10.0.0.8")


async def test_parallel_attempts_take_at_most_the_limit_and_one_lockout() -> None:
    throttle = SignInThrottle()
    answers = await asyncio.gather(*(throttle.reserve("root", "10.0.0.1") for _ in range(100)))
    attempts = [a for a in answers if isinstance(a, Attempt)]
    assert len(attempts) == LIMITS.max_failures_per_user
    assert sum(len(a.lockouts) for a in attempts) == 1


async def test_right_passwords_never_fill_a_limit() -> None:
    throttle = SignInThrottle()
    for _ in range(3 * LIMITS.max_failures_per_address):  # a script, a scrape every 15 s
        await succeed(throttle, "prometheus", "10.0.0.9")
    for i in range(LIMITS.max_failures_per_address - 1):
        await fail(throttle, f"typo{i}", "10.0.0.9")
    await succeed(throttle, "prometheus", "10.0.0.9")


async def test_a_right_password_clears_its_address_failures_for_the_username() -> None:
    throttle = SignInThrottle()
    await fail(throttle, "root", "10.0.0.2")  # the owner mistypes
    await succeed(throttle, "root", "10.0.0.2")
    for _ in range(LIMITS.max_failures_per_user - 1):  # the typo counts for root
        await fail(throttle, "root", "10.0.0.1")  # then someone locks root
    assert isinstance(await throttle.reserve("root", "10.0.0.1"), Refusal)
    await succeed(throttle, "root", "10.0.0.2")


async def test_an_attempt_that_could_not_be_checked_counts_as_no_failure() -> None:
    throttle = SignInThrottle(limits=SignInLimits(max_failures_per_user=1))
    attempt = await fail(throttle, "root", "10.0.0.1")
    await throttle.abandoned(attempt)
    await fail(throttle, "root", "10.0.0.1")


async def test_a_slot_given_back_after_its_window_ended_makes_no_room() -> None:
    throttle = SignInThrottle(limits=SignInLimits(max_failures_per_user=2))
    taken = await fail(throttle, "root", "10.0.0.1")
    storage = throttle.counts.memory
    for key in (keys_for("root", "10.0.0.1").user, keys_for("root", "10.0.0.1").address):
        await storage.clear(key)  # as the window's end does
    await throttle.abandoned(taken)  # the old window's slot: nothing to give back
    await fail(throttle, "root", "10.0.0.1")
    await fail(throttle, "root", "10.0.0.1")
    assert isinstance(await throttle.reserve("root", "10.0.0.1"), Refusal)


def test_keys_of_usernames_and_addresses_cannot_run_into_each_other() -> None:
    assert keys_for("a/b", "c").pair != keys_for("a", "b/c").pair
    assert keys_for("a", "b").user == "sign-in/user/a"


def test_retry_after_is_whole_seconds_rounded_up_and_at_least_one() -> None:
    assert seconds_until(100.0, 99.9) == 1
    assert seconds_until(100.0, 101.0) == 1
    assert seconds_until(100.0, 0.5) == 100


async def test_gateways_sharing_redis_share_the_counts_and_the_limit(
    redis_server: PrivateRedis,
) -> None:
    url = f"async+{redis_server.url}"
    one, two = SignInThrottle(SharedCounts(url)), SignInThrottle(SharedCounts(url))
    answers = await asyncio.gather(
        *((one, two)[i % 2].reserve("root-shared", "10.1.0.1") for i in range(100))
    )
    assert sum(isinstance(a, Attempt) for a in answers) == LIMITS.max_failures_per_user
    assert isinstance(await one.reserve("root-shared", "10.1.0.1"), Refusal)
    assert isinstance(await two.reserve("root-shared", "10.1.0.1"), Refusal)
    await succeed(two, "root-shared", "10.1.0.2")
    assert one.counts.redis_up and "sign-in" in redis_server.command("keys", "*")
