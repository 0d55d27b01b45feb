"""Failed sign-ins, counted per username and per client address, so that passwords
cannot be guessed at the speed of the network.

After MAX_FAILURES_PER_USER failures for one username, or MAX_FAILURES_PER_ADDRESS from
one address, within WINDOW_S (a moving window), further attempts are refused without
checking the password until the window has room again. A successful sign-in clears its
username's count (not its address's). The counts live in the `limits` library's storage:
this process's memory by default, Redis when several gateways must share them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from limits import RateLimitItemPerSecond
from limits.aio.storage import Storage
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import storage_from_string

WINDOW_S = 300
MAX_FAILURES_PER_USER = 10
MAX_FAILURES_PER_ADDRESS = 50


@dataclass(frozen=True, slots=True)
class Lockout:
    """A username or address whose failures just reached its limit."""

    what: str  # "username" or "address"
    who: str
    num_failures: int


class SignInThrottle:
    def __init__(self, storage_uri: str = "async+memory://") -> None:
        storage = storage_from_string(storage_uri)
        assert isinstance(storage, Storage), f"{storage_uri} is not an async+ storage"
        self.storage = storage
        self._limiter = MovingWindowRateLimiter(self.storage)
        self._per_user = RateLimitItemPerSecond(MAX_FAILURES_PER_USER, WINDOW_S)
        self._per_address = RateLimitItemPerSecond(MAX_FAILURES_PER_ADDRESS, WINDOW_S)

    async def wait_s(self, username: str, address: str) -> int | None:
        """Seconds until this username may try again from this address; None: now."""
        waits = []
        for item, key in ((self._per_user, username), (self._per_address, address)):
            if not await self._limiter.test(item, "sign-in", key):
                reset_ts = (await self._limiter.get_window_stats(item, "sign-in", key)).reset_time
                waits.append(max(1, math.ceil(reset_ts - time.time())))
        return max(waits) if waits else None

    async def failed(self, username: str, address: str) -> list[Lockout]:
        """Count a failure; the limits it has just filled."""
        filled = []
        for what, item, key in (
            ("username", self._per_user, username),
            ("address", self._per_address, address),
        ):
            await self._limiter.hit(item, "sign-in", key)
            if (await self._limiter.get_window_stats(item, "sign-in", key)).remaining == 0:
                filled.append(Lockout(what, key, item.amount))
        return filled

    async def succeeded(self, username: str) -> None:
        await self._limiter.clear(self._per_user, "sign-in", username)
