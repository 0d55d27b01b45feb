"""The SQL of users, API keys and console sessions."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, func, select

from vigil.platform.control.access.records import Role
from vigil.platform.control.access.tables import ApiKey, ConsoleSession, User
from vigil.platform.control.db import NamedRepository, Repository


class UserRepository(NamedRepository[User]):
    row_type = User
    name_column = User.username

    async def num_active_admins(self) -> int:
        stmt = select(func.count()).where(User.role == Role.ADMIN, User.disabled_at.is_(None))
        return int((await self.session.execute(stmt)).scalar_one())


class ApiKeyRepository(NamedRepository[ApiKey]):
    row_type = ApiKey
    name_column = ApiKey.name

    async def by_hash(self, key_hash: str) -> ApiKey | None:
        stmt = select(ApiKey).where(ApiKey.key_hash == key_hash)
        return (await self.session.execute(stmt)).scalar_one_or_none()


class SessionRepository(Repository[ConsoleSession]):
    async def get(self, key_hash: str) -> ConsoleSession | None:
        return await self.session.get(ConsoleSession, key_hash)

    async def delete_key(self, key_hash: str) -> None:
        await self.session.execute(
            delete(ConsoleSession).where(ConsoleSession.key_hash == key_hash)
        )

    async def delete_all(self) -> None:
        await self.session.execute(delete(ConsoleSession))

    async def delete_expired(self, now: datetime) -> int:
        stmt = delete(ConsoleSession).where(ConsoleSession.expires_at <= now)
        result = await self.session.execute(stmt)
        return int(result.rowcount)  # type: ignore[attr-defined]
