"""Authentication: keys become principals, with a short cache, a rate limit per key
and a priority header that can only lower a key's class. No sleeps: a fake clock for
the lookup cache; the rate counts in the `limits` library's storage (memory, or the
private Redis for the count several gateways share)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from asyncpg.exceptions import CannotConnectNowError  # type: ignore[import-untyped]
from redis_server import PrivateRedis
from sqlalchemy import exc as sa_exc

from vigil.engine.request import Priority
from vigil.platform.control.access.keys import ApiKeyService
from vigil.platform.control.access.records import ApiKeyRecord
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.migrate import migrate
from vigil.platform.errors import InvalidRequest, RateLimited, Unauthorized
from vigil.platform.gateway.auth import (
    ANONYMOUS,
    Authenticator,
    AuthMode,
    Principal,
    bearer_token,
    retry_after_s,
)
from vigil.platform.gateway.rate_limits import KeyRateLimits
from vigil.platform.gateway.shared_counts import SharedCounts


def memory_rates() -> KeyRateLimits:
    return KeyRateLimits(SharedCounts("async+memory://"))


class FakeClock:
    def __init__(self) -> None:
        self.now_ts = 1000.0

    def __call__(self) -> float:
        return self.now_ts


class CountingKeys(ApiKeyService):
    """The real service, counting how often a request reaches the database."""

    num_finds = 0
    away = False  # the database restarting: finds fail as they do through asyncpg

    async def find(self, plaintext: str) -> ApiKeyRecord | None:
        self.num_finds += 1
        if self.away:
            starting = CannotConnectNowError("the database system is starting up")
            raise sa_exc.DBAPIError("SELECT", {}, starting)
        return await super().find(plaintext)


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("auth-template") / "vigil.db"
    migrate(f"sqlite+aiosqlite:///{path}")
    return path


@pytest.fixture
async def keys(migrated_db: Path, tmp_path: Path) -> AsyncIterator[CountingKeys]:
    path = shutil.copy(migrated_db, tmp_path / "vigil.db")
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        yield CountingKeys(session_factory(engine))
    finally:
        await engine.dispose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def authenticator(keys: ApiKeyService, clock: FakeClock, mode: AuthMode) -> Authenticator:
    return Authenticator(keys, mode, memory_rates(), cache_ttl_s=5.0, clock=clock)


# ---- missing, malformed, unknown and revoked keys ----


async def test_open_mode_serves_a_request_without_a_key_as_anonymous(
    keys: CountingKeys, clock: FakeClock
) -> None:
    auth = authenticator(keys, clock, AuthMode.OPEN)
    assert await auth.authenticate(None, None) == ANONYMOUS
    assert ANONYMOUS.may_use("any-model")


async def test_keys_mode_refuses_a_request_without_a_key_and_says_how_to_send_one(
    keys: CountingKeys, clock: FakeClock
) -> None:
    auth = authenticator(keys, clock, AuthMode.KEYS)
    with pytest.raises(Unauthorized) as caught:
        await auth.authenticate(None, None)
    assert caught.value.code == "missing_api_key"
    assert "Authorization: Bearer <key>" in caught.value.message
    assert caught.value.scheme == "Bearer"


async def test_a_mode_given_as_a_plain_string_is_enforced(
    keys: CountingKeys, clock: FakeClock
) -> None:
    auth = Authenticator(keys, "keys", memory_rates(), clock=clock)  # type: ignore[arg-type]  # as settings hold it
    with pytest.raises(Unauthorized):
        await auth.authenticate(None, None)
    with pytest.raises(ValueError):
        Authenticator(keys, "closed", memory_rates(), clock=clock)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", list(AuthMode))
@pytest.mark.parametrize("header", ["Basic dXNlcjpwdw==", "Bearer", "Bearer ", "vgl_abc", ""])
async def test_a_malformed_authorization_header_is_refused_in_both_modes(
    keys: CountingKeys, clock: FakeClock, mode: AuthMode, header: str
) -> None:
    auth = authenticator(keys, clock, mode)
    with pytest.raises(Unauthorized) as caught:
        await auth.authenticate(header, None)
    assert caught.value.code == "invalid_api_key"
    assert "Bearer <key>" in caught.value.message


@pytest.mark.parametrize("mode", list(AuthMode))
async def test_an_unknown_or_revoked_key_is_refused_in_both_modes_without_echoing_it(
    keys: CountingKeys, clock: FakeClock, mode: AuthMode
) -> None:
    _, plaintext = await keys.create("gone")
    await keys.revoke("gone")
    auth = authenticator(keys, clock, mode)
    for key in (plaintext, "vgl_not-a-real-key"):
        with pytest.raises(Unauthorized) as caught:
            await auth.authenticate(f"Bearer {key}", None)
        assert caught.value.code == "invalid_api_key"
        assert key not in caught.value.message and key[4:12] not in caught.value.message


async def test_a_valid_key_becomes_its_principal(keys: CountingKeys, clock: FakeClock) -> None:
    _, plaintext = await keys.create("ci", Priority.BATCH, ["small"])
    auth = authenticator(keys, clock, AuthMode.KEYS)
    principal = await auth.authenticate(f"bearer  {plaintext} ", None)
    assert principal == Principal("ci", Priority.BATCH, frozenset({"small"}))
    assert principal.may_use("small") and not principal.may_use("large")


def test_bearer_token_reads_the_scheme_case_insensitively() -> None:
    assert bearer_token("Bearer vgl_x") == "vgl_x"
    assert bearer_token("BEARER vgl_x") == "vgl_x"
    assert bearer_token("Bearer vgl_x extra") is None
    assert bearer_token("Token vgl_x") is None


# ---- the cache ----


async def test_lookups_are_cached_so_most_requests_skip_the_database(
    keys: CountingKeys, clock: FakeClock
) -> None:
    _, plaintext = await keys.create("web")
    auth = authenticator(keys, clock, AuthMode.KEYS)
    for _ in range(5):
        await auth.authenticate(f"Bearer {plaintext}", None)
        clock.now_ts += 0.5
    assert keys.num_finds == 1


async def test_unknown_keys_are_cached_too(keys: CountingKeys, clock: FakeClock) -> None:
    auth = authenticator(keys, clock, AuthMode.OPEN)
    for _ in range(3):
        with pytest.raises(Unauthorized):
            await auth.authenticate("Bearer vgl_guess", None)
    assert keys.num_finds == 1
    clock.now_ts += 5.0
    with pytest.raises(Unauthorized):
        await auth.authenticate("Bearer vgl_guess", None)
    assert keys.num_finds == 2


async def test_a_revoked_key_stops_working_once_its_cache_entry_expires(
    keys: CountingKeys, clock: FakeClock
) -> None:
    _, plaintext = await keys.create("leaked")
    auth = authenticator(keys, clock, AuthMode.KEYS)
    await auth.authenticate(f"Bearer {plaintext}", None)
    await keys.revoke("leaked")
    clock.now_ts += 4.9
    assert (await auth.authenticate(f"Bearer {plaintext}", None)).key_name == "leaked"
    clock.now_ts += 0.1  # cache_ttl_s after the first lookup
    with pytest.raises(Unauthorized):
        await auth.authenticate(f"Bearer {plaintext}", None)


async def test_a_key_seen_before_keeps_working_while_the_database_is_away(
    keys: CountingKeys, clock: FakeClock
) -> None:
    _, plaintext = await keys.create("web")
    auth = authenticator(keys, clock, AuthMode.KEYS)
    await auth.authenticate(f"Bearer {plaintext}", None)
    keys.away = True
    clock.now_ts += 60.0
    assert (await auth.authenticate(f"Bearer {plaintext}", None)).key_name == "web"
    clock.now_ts += 1.0  # asked again only after another cache_ttl_s
    assert (await auth.authenticate(f"Bearer {plaintext}", None)).key_name == "web"
    assert keys.num_finds == 2
    with pytest.raises(sa_exc.DBAPIError):  # a key never seen: nothing to go on
        await auth.authenticate("Bearer vgl_never_seen", None)
    auth.forget_keys()  # an admin write through this gateway: look keys up again ...
    assert (await auth.authenticate(f"Bearer {plaintext}", None)).key_name == "web"
    assert keys.num_finds == 4  # ... and they were, and the last answer held again


# ---- the rate limit ----


def test_retry_after_is_whole_seconds_rounded_up_and_at_least_one() -> None:
    assert retry_after_s(30.0) == 30
    assert retry_after_s(0.2) == 1
    assert retry_after_s(0.0) == 1
    assert retry_after_s(2.01) == 3


async def test_a_key_over_its_rate_limit_gets_429_with_retry_after(
    keys: CountingKeys, clock: FakeClock
) -> None:
    _, plaintext = await keys.create("slow", rate_limit_per_minute=2)
    auth = authenticator(keys, clock, AuthMode.KEYS)
    header = f"Bearer {plaintext}"
    await auth.authenticate(header, None)
    await auth.authenticate(header, None)
    with pytest.raises(RateLimited) as caught:
        await auth.authenticate(header, None)
    assert caught.value.code == "rate_limit_exceeded"
    assert 1 <= caught.value.retry_after_s <= 60
    assert "2 requests a minute" in str(caught.value)


async def test_gateways_sharing_redis_share_each_keys_rate(
    keys: CountingKeys, clock: FakeClock, redis_server: PrivateRedis
) -> None:
    """Two gateways' authenticators on a real Redis: a key gets its rate once, not
    once per gateway."""
    name = f"shared-{uuid.uuid4().hex[:8]}"  # the Redis server lives all session
    _, plaintext = await keys.create(name, rate_limit_per_minute=4)
    one, two = (
        Authenticator(
            keys,
            AuthMode.KEYS,
            KeyRateLimits(SharedCounts(f"async+{redis_server.url}")),
            clock=clock,
        )
        for _ in range(2)
    )
    header = f"Bearer {plaintext}"
    for i in range(4):
        await (one if i % 2 else two).authenticate(header, None)
    for auth in (one, two):
        with pytest.raises(RateLimited):
            await auth.authenticate(header, None)


async def test_rate_limits_are_per_key_and_keys_without_one_are_unlimited(
    keys: CountingKeys, clock: FakeClock
) -> None:
    _, limited = await keys.create("limited", rate_limit_per_minute=1)
    _, free = await keys.create("free")
    auth = authenticator(keys, clock, AuthMode.KEYS)
    await auth.authenticate(f"Bearer {limited}", None)
    with pytest.raises(RateLimited):
        await auth.authenticate(f"Bearer {limited}", None)
    for _ in range(100):
        await auth.authenticate(f"Bearer {free}", None)


# ---- the priority header ----


async def test_priority_header_lowers_an_interactive_key_to_batch(
    keys: CountingKeys, clock: FakeClock
) -> None:
    _, plaintext = await keys.create("web")
    auth = authenticator(keys, clock, AuthMode.KEYS)
    assert (await auth.authenticate(f"Bearer {plaintext}", "batch")).priority is Priority.BATCH
    principal = await auth.authenticate(f"Bearer {plaintext}", "interactive")
    assert principal.priority is Priority.INTERACTIVE


async def test_priority_header_never_raises_a_batch_key(
    keys: CountingKeys, clock: FakeClock
) -> None:
    _, plaintext = await keys.create("nightly", Priority.BATCH)
    auth = authenticator(keys, clock, AuthMode.KEYS)
    principal = await auth.authenticate(f"Bearer {plaintext}", "interactive")
    assert principal.priority is Priority.BATCH


async def test_priority_header_lowers_anonymous_requests_too(
    keys: CountingKeys, clock: FakeClock
) -> None:
    auth = authenticator(keys, clock, AuthMode.OPEN)
    assert (await auth.authenticate(None, " Batch ")).priority is Priority.BATCH


@pytest.mark.parametrize("value", ["urgent", "", "0"])
async def test_an_unknown_priority_is_a_400_naming_the_header(
    keys: CountingKeys, clock: FakeClock, value: str
) -> None:
    auth = authenticator(keys, clock, AuthMode.OPEN)
    with pytest.raises(InvalidRequest) as caught:
        await auth.authenticate(None, value)
    assert caught.value.param == "x-vigil-priority"
    assert "'interactive' or 'batch'" in caught.value.message


async def test_a_bad_priority_header_uses_none_of_the_rate_limit(
    keys: CountingKeys, clock: FakeClock
) -> None:
    _, plaintext = await keys.create("careful", rate_limit_per_minute=1)
    auth = authenticator(keys, clock, AuthMode.KEYS)
    with pytest.raises(InvalidRequest):
        await auth.authenticate(f"Bearer {plaintext}", "urgent")
    assert (await auth.authenticate(f"Bearer {plaintext}", None)).key_name == "careful"
