"""Each API key's request rate, counted where every gateway sees the same count.

A key with `rate_limit_per_minute = N` may send N requests in any minute. The count is
a sliding window counter (the `limits` library's: this minute's count plus the last
minute's, weighted by how much of it is still inside the window), which allows no burst
of 2N across a minute boundary as a fixed window would, and costs two counters per key
instead of a timestamp per request as a moving window does. It lives in the same storage
as the sign-in throttle (SharedCounts): this process's memory, or Redis when several
gateways serve the same keys (`--redis-url`), so a key cannot get N a minute from each
gateway; while Redis is away, each gateway counts in its own memory.
"""

from __future__ import annotations

import time

from limits import RateLimitItemPerMinute
from limits.aio.storage import Storage
from limits.aio.strategies import SlidingWindowCounterRateLimiter

from vigil.platform.gateway.shared_counts import SharedCounts

NAMESPACE = "api-key"


class KeyRateLimits:
    def __init__(self, counts: SharedCounts) -> None:
        self._counts = counts

    async def take(self, key_name: str, per_minute: int) -> float | None:
        """Count one request of the key: None when it is within its rate, else the
        seconds until the window has room again."""
        assert per_minute >= 1, f"rate {per_minute} < 1"
        item = RateLimitItemPerMinute(per_minute)

        async def take(storage: Storage) -> float | None:
            limiter = SlidingWindowCounterRateLimiter(storage)
            if await limiter.hit(item, NAMESPACE, key_name):
                return None
            stats = await limiter.get_window_stats(item, NAMESPACE, key_name)
            return max(0.0, stats.reset_time - time.time())

        _, wait_s = await self._counts.run(take)
        return wait_s
