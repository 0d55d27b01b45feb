"""Where the counts every gateway must agree on live (failed sign-ins, each API key's
rate): Redis with `--redis-url`, this process's memory without it.

Redis unreachable does not open the limits, nor fail the requests they guard: while it
is away each count is kept in this process's memory, so the throttle and the key rates
still hold, per gateway (with N gateways a key may get up to N times its rate, an
address N times its sign-in failures, until Redis is back). An operation that finds
Redis away is done again in memory at once; Redis is tried again after a backoff (1 s,
doubling to 10 s) rather than on every request, so an outage costs one failed connect
per backoff and not one per request. The first operation that reaches Redis again
resumes the shared counts, which hold what they held before the outage; what was
counted in memory meanwhile stays there until its window ends. Connect and read
timeouts bound how long an operation can wait on a Redis that hangs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from limits.aio.storage import MemoryStorage, Storage
from limits.storage import storage_from_string

log = logging.getLogger(__name__)

T = TypeVar("T")

REDIS_TIMEOUT_S = 0.5  # to connect, and to wait for an answer
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 10.0


def retry_after_s(num_failures: int) -> float:
    """How long to keep to memory after `num_failures` failed tries of Redis in a row."""
    assert num_failures >= 1, f"{num_failures} failures: nothing to back off from"
    return min(MAX_RETRY_S, FIRST_RETRY_S * 2 ** (num_failures - 1))


@dataclass(slots=True)
class RedisHealth:
    """What this gateway knows of Redis: up, or away since a failure and until when."""

    num_failures: int = 0  # in a row; 0: up
    retry_ts: float = 0.0  # while away: when Redis is tried again

    @property
    def up(self) -> bool:
        return self.num_failures == 0

    def may_try(self, now_ts: float) -> bool:
        return self.up or now_ts >= self.retry_ts

    def failed(self, now_ts: float) -> None:
        self.num_failures += 1
        self.retry_ts = now_ts + retry_after_s(self.num_failures)

    def reached(self) -> None:
        self.num_failures = 0


class SharedCounts:
    def __init__(self, storage_uri: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.memory = MemoryStorage()
        self.redis: Storage | None = None
        if not storage_uri.startswith("async+memory"):
            options = {"connect_timeout": REDIS_TIMEOUT_S, "stream_timeout": REDIS_TIMEOUT_S}
            storage = storage_from_string(storage_uri, **options)
            assert isinstance(storage, Storage), f"{storage_uri} is not an async+ storage"
            self.redis = storage
        self.health = RedisHealth()
        self.num_redis_errors = 0
        self._clock = clock

    @property
    def redis_up(self) -> bool | None:
        """None without Redis."""
        return None if self.redis is None else self.health.up

    async def run(self, op: Callable[[Storage], Awaitable[T]]) -> tuple[Storage, T]:
        """`op` on Redis, or in memory while Redis is away; the storage it ran on (a
        reservation made there is given back there) and its result."""
        if self.redis is not None and self.health.may_try(self._clock()):
            try:
                result = await op(self.redis)
            except self._redis_errors() as exc:
                self._redis_failed(exc)
            else:
                self._redis_reached()
                return self.redis, result
        return self.memory, await op(self.memory)

    async def on(self, storage: Storage, op: Callable[[Storage], Awaitable[None]]) -> None:
        """`op` on the storage a count was taken in. Should that be Redis and Redis be
        away, it is not done: a reservation not given back runs out with its window,
        which errs on the side of refusing."""
        try:
            await op(storage)
        except self._redis_errors() as exc:
            if storage is self.memory:
                raise
            self._redis_failed(exc)

    async def probe(self) -> bool | None:
        """Whether Redis answers (None without Redis), asked now unless it is being
        backed off from; for /readyz, so that an outage shows without traffic."""
        if self.redis is None:
            return None
        if self.health.may_try(self._clock()):
            if await self.redis.check():
                self._redis_reached()
            else:
                self._redis_failed(None)
        return self.health.up

    def _redis_errors(self) -> tuple[type[BaseException], ...]:
        assert self.redis is not None
        base = self.redis.base_exceptions
        return (*(base if isinstance(base, tuple) else (base,)), OSError, TimeoutError)

    def _redis_failed(self, exc: BaseException | None) -> None:
        self.num_redis_errors += 1
        was_up = self.health.up
        self.health.failed(self._clock())
        if was_up:
            log.warning(
                "Redis is unreachable (%s): counting sign-in failures and key rates in "
                "this process until it is back",
                exc or "no answer to PING",
            )

    def _redis_reached(self) -> None:
        if not self.health.up:
            log.warning("Redis is reachable again: the counts are shared again")
        self.health.reached()
