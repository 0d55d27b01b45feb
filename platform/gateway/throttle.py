"""Failed sign-ins, counted so that passwords cannot be guessed at the speed of the
network, and so that guessing wrong does not lock the real user out.

Each count is a window of `window_s` (5 minutes) that starts with the first failure of
a series:
- per address: after 50 failures from one address, every sign-in from it is refused,
  without its password being checked, until the window ends.
- per username: after 10 failures for one username, from anywhere, the username is
  locked for the addresses that failed for it in the window. An address that has not
  may still try, and is locked out for the username at its first failure. So whoever
  guesses locks out only their own address: the real user, from an address of theirs,
  still signs in (a script or Prometheus with the right password included). While the
  lock holds, a guesser gets one try per further address, each within that address's
  own limit.
- per username and address: which addresses have failed for a username; a sign-in
  with the right password clears its own.

A sign-in takes its slots before the password is checked, by an atomic increment
(INCRBY in Redis, a lock in memory), and gives them back when the password is right: a
burst of parallel guesses, however many are in flight, has at most the limit checked.
The sign-in that takes a limit's last slot and fails is the one lockout of that window
(`Lockout`), so a burst writes one audit entry, not one per guess. The counts live in
SharedCounts: Redis when several gateways must share them, this process's memory
without Redis or while it is away.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import quote

from limits.aio.storage import Storage

from vigil.platform.gateway.shared_counts import SharedCounts

NAMESPACE = "sign-in"


@dataclass(frozen=True, slots=True)
class SignInLimits:
    window_s: int = 300
    max_failures_per_user: int = 10
    max_failures_per_address: int = 50


class Held(StrEnum):
    """What a limit counts the failures of."""

    USERNAME = "username"
    ADDRESS = "address"


@dataclass(frozen=True, slots=True)
class Lockout:
    """A username or address whose failures this attempt's failure brings to its limit."""

    what: Held
    who: str
    num_failures: int


@dataclass(frozen=True, slots=True)
class Refusal:
    """A sign-in refused before its password is checked."""

    what: Held
    who: str
    retry_after_s: int


@dataclass(frozen=True, slots=True)
class Attempt:
    """A sign-in's slots, taken before its password is checked: given back if it is
    right, kept (as failures) if it is wrong."""

    storage: Storage  # where the slots were taken, where they are given back
    taken_keys: tuple[str, ...]
    pair_key: str
    lockouts: tuple[Lockout, ...]  # the limits whose last slot this attempt took


@dataclass(frozen=True, slots=True)
class _Keys:
    address: str
    user: str
    pair: str


def keys_for(username: str, address: str) -> _Keys:
    user, where = quote(username, safe=""), quote(address, safe="")  # no '/' inside a part
    return _Keys(
        f"{NAMESPACE}/address/{where}",
        f"{NAMESPACE}/user/{user}",
        f"{NAMESPACE}/pair/{user}/{where}",
    )


def seconds_until(end_ts: float, now_ts: float) -> int:
    """Whole seconds for Retry-After: rounded up, at least 1."""
    return max(1, math.ceil(end_ts - now_ts))


class SignInThrottle:
    def __init__(
        self, counts: SharedCounts | None = None, limits: SignInLimits | None = None
    ) -> None:
        self.counts = counts or SharedCounts("async+memory://")  # None: this process's
        self.limits = limits or SignInLimits()

    async def reserve(self, username: str, address: str) -> Attempt | Refusal:
        storage, taken = await self.counts.run(
            lambda storage: self._take(storage, keys_for(username, address), username, address)
        )
        if isinstance(taken, Refusal):
            return taken
        taken_keys, lockouts = taken
        return Attempt(storage, taken_keys, keys_for(username, address).pair, lockouts)

    async def succeeded(self, attempt: Attempt) -> None:
        """The password was right: its slots are given back, and its address has not
        failed for the username."""

        async def give_back(storage: Storage) -> None:
            for key in attempt.taken_keys:
                if key != attempt.pair_key:
                    await self._give_back(storage, key)
            await storage.clear(attempt.pair_key)

        await self.counts.on(attempt.storage, give_back)

    async def abandoned(self, attempt: Attempt) -> None:
        """The password could not be checked (the database is away): no failure."""

        async def give_back(storage: Storage) -> None:
            for key in attempt.taken_keys:
                await self._give_back(storage, key)

        await self.counts.on(attempt.storage, give_back)

    async def _take(
        self, storage: Storage, keys: _Keys, username: str, address: str
    ) -> tuple[tuple[str, ...], tuple[Lockout, ...]] | Refusal:
        limits = self.limits
        num_address = await self._incr(storage, keys.address)
        if num_address > limits.max_failures_per_address:
            await self._give_back(storage, keys.address)
            end_ts = await storage.get_expiry(keys.address)
            return Refusal(Held.ADDRESS, address, seconds_until(end_ts, time.time()))
        num_user = await self._incr(storage, keys.user)
        taken: tuple[str, ...]
        if num_user <= limits.max_failures_per_user:
            await self._incr(storage, keys.pair)
            taken = (keys.address, keys.user, keys.pair)
        else:  # the username is locked: only for the addresses that failed for it
            await self._give_back(storage, keys.user)
            if await self._incr(storage, keys.pair) > 1:
                await self._give_back(storage, keys.pair)
                await self._give_back(storage, keys.address)
                end_ts = min(
                    await storage.get_expiry(keys.user), await storage.get_expiry(keys.pair)
                )
                return Refusal(Held.USERNAME, username, seconds_until(end_ts, time.time()))
            taken = (keys.address, keys.pair)
        lockouts = []
        if num_address == limits.max_failures_per_address:
            lockouts.append(Lockout(Held.ADDRESS, address, num_address))
        if num_user == limits.max_failures_per_user:
            lockouts.append(Lockout(Held.USERNAME, username, num_user))
        return taken, tuple(lockouts)

    async def _incr(self, storage: Storage, key: str) -> int:
        return await storage.incr(key, self.limits.window_s)

    async def _give_back(self, storage: Storage, key: str) -> None:
        if await storage.incr(key, self.limits.window_s, -1) < 0:
            # The window ended while the slot was out (the count started again without
            # it): giving it back would make room nobody had taken.
            await storage.incr(key, self.limits.window_s, 1)
