"""Who is calling: an API key from the Authorization header becomes a Principal.

Decisions are pure (`bearer_token`, `requested_priority`, `effective_priority`);
`Authenticator` is the shell that holds the clock and a short cache of key lookups, and
counts each key's requests against its rate limit (gateway/rate_limits.py: shared by
every gateway when they share Redis).

A key that is sent must be valid in both modes; `AuthMode.OPEN` only lets a request
without any key through, as `ANONYMOUS`. Lookups are cached for `cache_ttl_s`; the cache
is dropped whenever the control plane changes (through this gateway, or through another
on the same PostgreSQL: control/changes.py), so a revoked key stops working at once here
and within about a second on the others; `cache_ttl_s` bounds it should a change
notice be lost. While the database cannot be reached, a key's last lookup holds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from vigil.engine.request import Priority
from vigil.platform.control.access.keys import KEY_PREFIX, ApiKeyService, hash_key
from vigil.platform.control.access.records import ApiKeyRecord
from vigil.platform.control.db import database_unreachable
from vigil.platform.errors import InvalidRequest, RateLimited, Unauthorized
from vigil.platform.gateway.rate_limits import KeyRateLimits

PRIORITY_HEADER = "x-vigil-priority"
MAX_CACHED_KEYS = 10_000  # bounds memory when a client sends many different bad keys


class AuthMode(StrEnum):
    OPEN = "open"  # a request without a key is served, as ANONYMOUS
    KEYS = "keys"  # every request needs a valid key


@dataclass(frozen=True, slots=True)
class Principal:
    key_name: str | None  # None: no key was sent (open mode)
    priority: Priority
    models: frozenset[str] | None  # deployments it may use; None: all

    def may_use(self, deployment: str) -> bool:
        return self.models is None or deployment in self.models


ANONYMOUS = Principal(None, Priority.INTERACTIVE, None)


def bearer_token(authorization: str) -> str | None:
    """The key in 'Bearer <key>' (the scheme is case-insensitive), or None."""
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
        return None
    return token


def requested_priority(header: str | None) -> Priority | None:
    """The class the x-vigil-priority header asks for; None when it is absent."""
    if header is None:
        return None
    priority = Priority.from_label(header.strip().lower())
    if priority is None:
        shown = header if len(header) <= 40 else header[:40] + "..."
        raise InvalidRequest(
            f"The {PRIORITY_HEADER} header must be 'interactive' or 'batch', got {shown!r}.",
            param=PRIORITY_HEADER,
            code="invalid_value",
        )
    return priority


def effective_priority(granted: Priority, requested: Priority | None) -> Priority:
    """A request may lower its key's class, never raise it: a batch key asking for
    interactive stays batch, without an error, so one client setting works for all
    its keys. (A larger Priority value is served later.)"""
    return granted if requested is None else max(granted, requested)


def retry_after_s(wait_s: float) -> int:
    """Whole seconds for Retry-After: rounded up, at least 1."""
    return max(1, math.ceil(round(wait_s, 3)))


@dataclass(slots=True)
class _CachedLookup:
    record: ApiKeyRecord | None  # None: unknown or revoked
    expires_ts: float


class Authenticator:
    def __init__(
        self,
        keys: ApiKeyService,
        mode: AuthMode,
        rates: KeyRateLimits,
        cache_ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._keys = keys
        # AuthMode(...) also takes the plain string settings hold ("keys"), so that a
        # str can never fail an `is AuthMode.KEYS` check and leave the server open.
        self.mode = AuthMode(mode)
        self._cache_ttl_s = cache_ttl_s
        self._clock = clock
        self._cache: dict[str, _CachedLookup] = {}  # key hash -> lookup, oldest first
        self._rates = rates

    async def authenticate(
        self, authorization: str | None, priority_header: str | None
    ) -> Principal:
        """Raises Unauthorized (401), InvalidRequest (400) or RateLimited (429), in
        that order of checks: a request that fails an earlier one uses no rate."""
        if authorization is None or self._placeholder(authorization):
            if self.mode is AuthMode.KEYS:
                raise Unauthorized(
                    "This server needs an API key: send it as 'Authorization: Bearer <key>'. "
                    "An operator creates one with `vigil keys create --name NAME`.",
                    code="missing_api_key",
                    scheme="Bearer",
                )
            priority = effective_priority(ANONYMOUS.priority, requested_priority(priority_header))
            return Principal(None, priority, None)
        record = await self._record(authorization)
        priority = effective_priority(record.priority, requested_priority(priority_header))
        await self._take_rate(record)
        return Principal(record.name, priority, record.models)

    def _placeholder(self, authorization: str) -> bool:
        """In open mode, a bearer token that is not a Vigil key at all (OpenAI clients
        insist on sending one, often 'EMPTY') counts as no key. A `vgl_` key must
        still be valid."""
        if self.mode is not AuthMode.OPEN:
            return False
        token = bearer_token(authorization)
        return token is not None and not token.startswith(KEY_PREFIX)

    async def _record(self, authorization: str) -> ApiKeyRecord:
        token = bearer_token(authorization)
        if token is None:
            raise Unauthorized(
                "The Authorization header must be 'Bearer <key>'.",
                code="invalid_api_key",
                scheme="Bearer",
            )
        record = await self._lookup(token)
        if record is None:
            raise Unauthorized(
                "The API key is unknown or has been revoked.",
                code="invalid_api_key",
                scheme="Bearer",
            )
        return record

    async def _take_rate(self, record: ApiKeyRecord) -> None:
        limit = record.rate_limit_per_minute
        if limit is None:
            return
        wait_s = await self._rates.take(record.name, limit)
        if wait_s is not None:
            seconds = retry_after_s(wait_s)
            raise RateLimited(
                f"The API key '{record.name}' may send {limit} requests a minute; "
                f"retry in {seconds} s.",
                code="rate_limit_exceeded",
                retry_after_s=seconds,
            )

    def forget_keys(self) -> None:
        """Look every key up again (after a control-plane change: a revoke, say). The
        answers are kept, expired: should the database be away, they still hold."""
        for lookup in self._cache.values():
            lookup.expires_ts = float("-inf")

    async def _lookup(self, token: str) -> ApiKeyRecord | None:
        key_hash = hash_key(token)
        now_ts = self._clock()
        cached = self._cache.get(key_hash)
        if cached is not None and cached.expires_ts > now_ts:
            return cached.record
        try:
            record = await self._keys.find(token)
        except Exception as exc:
            if cached is None or not database_unreachable(exc):
                raise
            # The database is away: its last answer holds, asked again after another ttl
            # (not on every request: a lookup may wait for a connect timeout).
            record = cached.record
        self._remember(key_hash, _CachedLookup(record, now_ts + self._cache_ttl_s), now_ts)
        return record

    def _remember(self, key_hash: str, lookup: _CachedLookup, now_ts: float) -> None:
        self._cache.pop(key_hash, None)  # re-insert at the end: entries stay oldest first
        if len(self._cache) >= MAX_CACHED_KEYS:
            self._cache = {h: c for h, c in self._cache.items() if c.expires_ts > now_ts}
            while len(self._cache) >= MAX_CACHED_KEYS:
                del self._cache[next(iter(self._cache))]
        self._cache[key_hash] = lookup
