"""Counts shared through Redis, kept in memory while a private Redis is stopped, tried
again after a bounded backoff (a fake clock: no sleeps), and shared again once it is
back."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from limits.aio.storage import Storage
from redis_server import PrivateRedis

from vigil.platform.gateway.rate_limits import KeyRateLimits
from vigil.platform.gateway.shared_counts import (
    MAX_RETRY_S,
    REDIS_TIMEOUT_S,
    RedisHealth,
    SharedCounts,
    retry_after_s,
)


class FakeClock:
    def __init__(self) -> None:
        self.now_ts = 1000.0

    def __call__(self) -> float:
        return self.now_ts


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    redis = PrivateRedis(tmp_path)
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


async def incr(storage: Storage) -> int:
    return await storage.incr("count", 60)


def test_the_backoff_doubles_from_1_s_to_at_most_10_s() -> None:
    assert [retry_after_s(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert MAX_RETRY_S == 10.0


def test_redis_away_is_tried_again_only_once_its_backoff_is_over() -> None:
    health = RedisHealth()
    assert health.up and health.may_try(0.0)
    health.failed(100.0)
    assert not health.up and not health.may_try(100.5) and health.may_try(101.0)
    health.failed(101.0)
    assert not health.may_try(102.9) and health.may_try(103.0)
    health.reached()
    assert health.up and health.may_try(103.0)


async def test_without_redis_counts_are_kept_in_memory() -> None:
    counts = SharedCounts("async+memory://")
    assert counts.redis is None and counts.redis_up is None and await counts.probe() is None
    storage, n = await counts.run(incr)
    assert storage is counts.memory and n == 1


async def test_counts_fall_back_to_memory_while_redis_is_away_and_go_back_after(
    redis: PrivateRedis,
) -> None:
    clock = FakeClock()
    counts = SharedCounts(f"async+{redis.url}", clock=clock)
    storage, n = await counts.run(incr)
    assert storage is counts.redis and n == 1 and counts.redis_up
    redis.stop()
    started = time.monotonic()
    storage, n = await counts.run(incr)  # found away: done in memory at once
    assert storage is counts.memory and n == 1 and counts.redis_up is False
    assert time.monotonic() - started < 4 * REDIS_TIMEOUT_S
    assert counts.num_redis_errors == 1
    for expected in (2, 3):  # within the backoff: Redis is not even tried
        assert await counts.run(incr) == (counts.memory, expected)
    assert counts.num_redis_errors == 1
    redis.start()
    assert await counts.run(incr) == (counts.memory, 4)  # still backing off
    clock.now_ts += retry_after_s(1)
    assert await counts.probe() is True
    storage, n = await counts.run(incr)
    assert storage is counts.redis and n == 1  # a new Redis: the pre-outage count is gone


async def test_a_probe_says_redis_is_away_without_any_traffic(redis: PrivateRedis) -> None:
    clock = FakeClock()
    counts = SharedCounts(f"async+{redis.url}", clock=clock)
    assert await counts.probe() is True
    redis.stop()
    assert await counts.probe() is False and counts.redis_up is False


async def test_a_keys_rate_holds_in_memory_while_redis_is_away(redis: PrivateRedis) -> None:
    rates = KeyRateLimits(SharedCounts(f"async+{redis.url}"))
    assert await rates.take("ci", 2) is None
    redis.stop()
    assert await rates.take("ci", 2) is None
    assert await rates.take("ci", 2) is None
    wait_s = await rates.take("ci", 2)
    assert wait_s is not None and 0 < wait_s <= 60


async def test_a_redis_that_never_answers_holds_an_operation_for_a_bounded_time() -> None:
    """A port that takes connections and never answers (a Redis hung, or a host that
    drops the packets): the operation is done in memory within the client's timeouts
    (REDIS_TIMEOUT_S a try, with the client's few retries), and the next ones at once."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        counts = SharedCounts(f"async+redis://127.0.0.1:{silent.getsockname()[1]}")
        started = time.monotonic()
        assert await counts.run(incr) == (counts.memory, 1)
        assert time.monotonic() - started < 8 * REDIS_TIMEOUT_S
        started = time.monotonic()
        assert await counts.run(incr) == (counts.memory, 2)
        assert await counts.probe() is False
        # At once: trying the silent port again would take a whole REDIS_TIMEOUT_S.
        assert time.monotonic() - started < REDIS_TIMEOUT_S / 2
