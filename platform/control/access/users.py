"""The rules for users: who may sign in (argon2id password hashes), with which role, and
that the last active admin stays one.

A password change or disabling a user ends all of the user's console sessions, as does
`sign_out_everywhere`: each moves the user's session epoch on, and a session signed in
under another epoch is refused at its next request (web/auth.py), on every gateway of
the database. A role change ends none: the console reads the role on every request.

Argon2 is slow on purpose (tens of milliseconds and 64 MiB a check), and HTTP Basic sends
the password with every request, so `authenticate` remembers a success for `cache_ttl_s`
keyed by (username, SHA-256 of the password). Any write to a user here drops its entries;
a write made by another process (another gateway on the same database) takes effect
here within `cache_ttl_s`.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.platform.control.access.records import Role, UserRecord
from vigil.platform.control.access.repository import UserRepository
from vigil.platform.control.access.tables import User
from vigil.platform.control.audit.repository import AuditRepository
from vigil.platform.control.db import OnChange, Service, nothing_changed, utcnow
from vigil.platform.control.names import check_name, must_exist, name_taken
from vigil.platform.errors import Conflict, InvalidRequest

MIN_PASSWORD_CHARS = 8
MAX_PASSWORD_CHARS = 1024
MAX_CACHED_LOGINS = 1000


class UserService(Service):
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        on_change: OnChange = nothing_changed,
        *,
        hasher: PasswordHasher | None = None,
        cache_ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(sessions, on_change)
        self._hasher = hasher or PasswordHasher()
        self._cache_ttl_s = cache_ttl_s
        self._clock = clock
        # (username, sha256(password)) -> (user, expires_ts): successes only
        self._verified: dict[tuple[str, str], tuple[UserRecord, float]] = {}
        self._dummy_hash: str | None = None

    async def create(
        self, username: str, password: str, role: Role = Role.VIEWER, *, actor: str
    ) -> UserRecord:
        check_name(username, "a user", param="username")
        password_hash = await self._hash(_check_password(password))
        try:
            async with self._sessions.begin() as session:
                repo = UserRepository(session)
                if await repo.get(username) is not None:
                    raise name_taken("user", username, param="username")
                row = User(username=username, password_hash=password_hash, role=Role(role).value)
                repo.add(row)
                await session.flush()
                AuditRepository(session).log(
                    actor, "user.create", "user", username, None, _snapshot(row)
                )
                record = UserRecord.of(row)
        except IntegrityError:
            raise name_taken("user", username, param="username") from None
        await self._on_change()
        return record

    async def list(self) -> list[UserRecord]:
        async with self._sessions() as session:
            return [UserRecord.of(row) for row in await UserRepository(session).list()]

    async def get(self, username: str) -> UserRecord:
        async with self._sessions() as session:
            return UserRecord.of(await _user(session, username))

    async def update(
        self,
        username: str,
        *,
        role: Role | None = None,
        disabled: bool | None = None,
        password: str | None = None,
        actor: str,
    ) -> UserRecord:
        """Change what is given (None: keep). The last active admin cannot be demoted or
        disabled: nobody could manage users afterwards."""
        new_hash = await self._hash(_check_password(password)) if password is not None else None
        async with self._sessions.begin() as session:
            repo = UserRepository(session)
            row = await _user(session, username)
            before, epoch = _snapshot(row), row.session_epoch
            new_role = Role(role) if role is not None else Role(row.role)
            now_disabled = disabled if disabled is not None else row.disabled_at is not None
            is_admin = row.role == Role.ADMIN and row.disabled_at is None
            stays_admin = new_role is Role.ADMIN and not now_disabled
            if is_admin and not stays_admin and await repo.num_active_admins() <= 1:
                raise Conflict(
                    f"{username!r} is the last active admin; make another user an admin first",
                    param="username",
                    code="last_admin",
                )
            row.role = new_role.value
            if now_disabled != (row.disabled_at is not None):
                row.disabled_at = utcnow() if now_disabled else None
                if now_disabled:  # enabling them again must not bring old sessions back
                    row.session_epoch += 1
            if new_hash is not None:
                row.password_hash = new_hash
                row.session_epoch += 1
            after = _snapshot(row) | ({"password_changed": True} if new_hash else {})
            if row.session_epoch != epoch:
                after["sessions_ended"] = True
            changed = after != before
            if changed:
                AuditRepository(session).log(actor, "user.update", "user", username, before, after)
            record = UserRecord.of(row)
        self._forget(username)
        if changed:
            await self._on_change()
        return record

    async def sign_out_everywhere(self, username: str, *, actor: str) -> UserRecord:
        """End every console session of the user, wherever it was signed in."""
        async with self._sessions.begin() as session:
            row = await _user(session, username)
            row.session_epoch += 1
            details = {"username": username, "sessions_ended": True}
            AuditRepository(session).log(
                actor, "user.sign_out_everywhere", "user", username, None, details
            )
            record = UserRecord.of(row)
        self._forget(username)
        return record

    async def set_role(self, username: str, role: Role, *, actor: str) -> UserRecord:
        return await self.update(username, role=role, actor=actor)

    async def disable(self, username: str, *, actor: str) -> UserRecord:
        return await self.update(username, disabled=True, actor=actor)

    async def authenticate(self, username: str, password: str) -> UserRecord | None:
        """The user, if the password is theirs and they are not disabled."""
        key = (username, hashlib.sha256(password.encode()).hexdigest())
        now_ts = self._clock()
        cached = self._verified.get(key)
        if cached is not None and cached[1] > now_ts:
            return cached[0]
        async with self._sessions() as session:
            row = await UserRepository(session).get(username)
            record = UserRecord.of(row) if row is not None else None
            stored = row.password_hash if row is not None else None
        if stored is None:
            await self._verify(await self._dummy(), password)  # same time as a wrong password
            return None
        if not await self._verify(stored, password) or record is None or record.disabled:
            return None
        self._remember(key, record, now_ts)
        return record

    async def _hash(self, password: str) -> str:
        return await asyncio.to_thread(self._hasher.hash, password)

    async def _verify(self, password_hash: str, password: str) -> bool:
        try:
            return await asyncio.to_thread(self._hasher.verify, password_hash, password)
        except (VerificationError, InvalidHashError):
            return False

    async def _dummy(self) -> str:
        if self._dummy_hash is None:
            self._dummy_hash = await self._hash("not a password of anyone")
        return self._dummy_hash

    def _remember(self, key: tuple[str, str], record: UserRecord, now_ts: float) -> None:
        if len(self._verified) >= MAX_CACHED_LOGINS:
            self._verified = {k: v for k, v in self._verified.items() if v[1] > now_ts}
            if len(self._verified) >= MAX_CACHED_LOGINS:
                self._verified.clear()
        self._verified[key] = (record, now_ts + self._cache_ttl_s)

    def _forget(self, username: str) -> None:
        self._verified = {k: v for k, v in self._verified.items() if k[0] != username}


def _check_password(password: str) -> str:
    if not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
        raise InvalidRequest(
            f"a password needs {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters",
            param="password",
            code="invalid_value",
        )
    return password


def _snapshot(row: User) -> dict[str, Any]:
    return {"username": row.username, "role": row.role, "disabled": row.disabled_at is not None}


async def _user(session: AsyncSession, username: str) -> User:
    row = await UserRepository(session).get(username)
    return must_exist(
        row, "user", username, param="username", listing="GET /api/admin/users lists them"
    )
