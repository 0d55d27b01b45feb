"""API keys in the control-plane database: shown once, stored as a hash, revocable;
refusals say why, with the code the admin API answers with."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from vigil.engine.request import Priority
from vigil.platform.control.access.keys import ApiKeyService, hash_key
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.migrate import migrate
from vigil.platform.errors import Conflict, InvalidRequest, NotFound


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One database migrated to head; each test works on a copy of it."""
    path = tmp_path_factory.mktemp("keys-template") / "vigil.db"
    migrate(f"sqlite+aiosqlite:///{path}")
    return path


@pytest.fixture
def db_path(migrated_db: Path, tmp_path: Path) -> Path:
    return Path(shutil.copy(migrated_db, tmp_path / "vigil.db"))


@pytest.fixture
async def keys(db_path: Path) -> AsyncIterator[ApiKeyService]:
    engine = create_engine(f"sqlite+aiosqlite:///{db_path}")
    try:
        yield ApiKeyService(session_factory(engine))
    finally:
        await engine.dispose()


def stored(db_path: Path) -> tuple[list[tuple[object, ...]], bytes]:
    """The api_keys rows, and the whole database file."""
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("SELECT * FROM api_keys").fetchall()
    return rows, db_path.read_bytes()


async def test_create_returns_the_key_once_and_stores_only_its_hash(
    keys: ApiKeyService, db_path: Path
) -> None:
    record, plaintext = await keys.create("ci", Priority.BATCH, ["m1", "m2"], 30)
    assert plaintext.startswith("vgl_") and len(plaintext) == 4 + 43
    assert plaintext.startswith(record.key_prefix) and len(record.key_prefix) == 12
    assert (record.name, record.priority, record.models) == ("ci", Priority.BATCH, {"m1", "m2"})
    assert record.rate_limit_per_minute == 30
    assert record.created_at.tzinfo is not None and record.revoked_at is None

    secret = plaintext[len(record.key_prefix) :]  # the part never shown again
    rows, file_bytes = stored(db_path)
    assert len(rows) == 1
    assert not any(secret in str(value) for value in rows[0])
    assert hash_key(plaintext) in rows[0]
    assert secret.encode() not in file_bytes
    assert plaintext not in repr(record)


async def test_find_returns_the_record_for_a_valid_key_only(keys: ApiKeyService) -> None:
    record, plaintext = await keys.create("web")
    assert await keys.find(plaintext) == record
    assert await keys.find(plaintext + "x") is None
    assert await keys.find("vgl_unknown") is None


async def test_new_keys_are_interactive_for_all_models_without_a_limit(
    keys: ApiKeyService,
) -> None:
    record, _ = await keys.create("defaults")
    assert record.priority is Priority.INTERACTIVE
    assert record.models is None and record.rate_limit_per_minute is None


async def test_each_key_is_different(keys: ApiKeyService) -> None:
    _, a = await keys.create("a")
    _, b = await keys.create("b")
    assert a != b


async def test_revoked_key_is_not_found_and_stays_listed(keys: ApiKeyService) -> None:
    _, plaintext = await keys.create("old")
    revoked = await keys.revoke("old")
    assert revoked.revoked_at is not None and revoked.revoked
    assert await keys.find(plaintext) is None
    assert [(r.name, r.revoked) for r in await keys.list()] == [("old", True)]


async def test_revoking_an_unknown_or_revoked_key_says_so(keys: ApiKeyService) -> None:
    with pytest.raises(NotFound, match="no API key is named 'ghost'") as missing:
        await keys.revoke("ghost")
    assert (missing.value.param, missing.value.code) == ("name", "key_not_found")
    await keys.create("once")
    await keys.revoke("once")
    with pytest.raises(Conflict, match="already revoked") as revoked:
        await keys.revoke("once")
    assert revoked.value.code == "key_conflict"


async def test_duplicate_names_are_refused_even_after_a_revoke(keys: ApiKeyService) -> None:
    await keys.create("team")
    with pytest.raises(Conflict, match="'team' already exists") as taken:
        await keys.create("team")
    assert (taken.value.param, taken.value.code) == ("name", "key_conflict")
    await keys.revoke("team")
    with pytest.raises(Conflict, match="already exists"):
        await keys.create("team")
    assert len(await keys.list()) == 1


@pytest.mark.parametrize("rate", [0, -5])
async def test_rate_limit_below_one_is_refused(keys: ApiKeyService, rate: int) -> None:
    with pytest.raises(InvalidRequest, match="at least 1 request per minute"):
        await keys.create("slow", rate_limit_per_minute=rate)
    assert await keys.list() == []


async def test_blank_names_and_empty_model_lists_are_refused(keys: ApiKeyService) -> None:
    with pytest.raises(InvalidRequest, match="needs a name"):
        await keys.create("  ")
    with pytest.raises(InvalidRequest, match="at least one model"):
        await keys.create("none", models=[" ", ""])
    assert await keys.list() == []


async def test_list_is_sorted_by_name_and_model_names_are_trimmed(keys: ApiKeyService) -> None:
    await keys.create("zeta", models=[" b ", "a", "a"])
    await keys.create("alpha")
    listed = await keys.list()
    assert [r.name for r in listed] == ["alpha", "zeta"]
    assert listed[1].models == frozenset({"a", "b"})


async def test_each_committed_write_tells_the_listener_once(db_path: Path) -> None:
    told: list[str] = []

    async def on_change() -> None:
        told.append("changed")

    engine = create_engine(f"sqlite+aiosqlite:///{db_path}")
    try:
        keys = ApiKeyService(session_factory(engine), on_change)
        _, plaintext = await keys.create("ci")
        await keys.find(plaintext)
        await keys.list()
        assert told == ["changed"]
        with pytest.raises(Conflict):
            await keys.create("ci")
        await keys.revoke("ci")
        assert told == ["changed", "changed"]
    finally:
        await engine.dispose()
