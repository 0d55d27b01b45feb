"""API keys as the admin API manages them: `ApiKeyService` (which audits each write)
with its errors mapped onto the API's and the listeners told after each write."""

from __future__ import annotations

from collections.abc import Sequence

from vigil.engine.request import Priority
from vigil.platform.control.api_keys import (
    ApiKeyConflict,
    ApiKeyError,
    ApiKeyNotFound,
    ApiKeyRecord,
    ApiKeyService,
)
from vigil.platform.control.audit import OnChange
from vigil.platform.errors import Conflict, InvalidRequest, NotFound, VigilError


class KeyAdminService:
    def __init__(self, keys: ApiKeyService, on_change: OnChange) -> None:
        self._keys = keys
        self._on_change = on_change

    async def create(
        self,
        name: str,
        priority: Priority = Priority.INTERACTIVE,
        models: Sequence[str] | None = None,
        rate_limit_per_minute: int | None = None,
        *,
        actor: str,
    ) -> tuple[ApiKeyRecord, str]:
        """The key's record and its plaintext, shown this once."""
        try:
            created = await self._keys.create(
                name, priority, models, rate_limit_per_minute, actor=actor
            )
        except ApiKeyError as exc:
            raise _api_error(exc) from None
        await self._on_change()
        return created

    async def list(self) -> list[ApiKeyRecord]:
        return await self._keys.list()

    async def revoke(self, name: str, *, actor: str) -> ApiKeyRecord:
        try:
            record = await self._keys.revoke(name, actor=actor)
        except ApiKeyError as exc:
            raise _api_error(exc) from None
        await self._on_change()
        return record


def _api_error(exc: ApiKeyError) -> VigilError:
    if isinstance(exc, ApiKeyNotFound):
        return NotFound(str(exc), param="name", code="key_not_found")
    if isinstance(exc, ApiKeyConflict):
        return Conflict(str(exc), param="name", code="key_conflict")
    return InvalidRequest(str(exc), code="invalid_value")
