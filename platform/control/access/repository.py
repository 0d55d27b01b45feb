"""The users' and API keys' SQL."""

from __future__ import annotations

from sqlalchemy import func, select

from vigil.platform.control.access.records import Role
from vigil.platform.control.access.tables import ApiKey, User
from vigil.platform.control.db import NamedRepository


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
