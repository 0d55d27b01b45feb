"""`/api/admin/users` and `/api/admin/keys`: who may sign in, and the API keys of the
OpenAI-compatible API. Admins only, reading included."""

from __future__ import annotations

from litestar import Controller, get, patch, post
from litestar.params import FromPath, JSONBody
from msgspec import UNSET

from vigil.engine.request import Priority
from vigil.platform.api.admin.deps import Actor, Plane
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.api.admin.schemas import KeyCreated, KeyIn, KeyOut, UserIn, UserOut, UserPatch
from vigil.platform.api.admin.views import key_out, user_out
from vigil.platform.control.access.records import Role

ADMIN = {"role": Role.ADMIN}


class UserController(Controller):
    path = "/users"

    @get("/", summary="List users", opt=ADMIN, responses=error_responses())
    async def list_users(self, plane: Plane) -> list[UserOut]:
        return [user_out(u) for u in await plane.users.list()]

    @post("/", summary="Create a user", opt=ADMIN, responses=error_responses(400, 409))
    async def create_user(self, plane: Plane, actor: Actor, data: JSONBody[UserIn]) -> UserOut:
        user = await plane.users.create(data.username, data.password, data.role, actor=actor)
        return user_out(user)

    @patch(
        "/{username:str}",
        summary="Change a user's role, password, or disable them",
        opt=ADMIN,
        responses=error_responses(400, 404, 409),
    )
    async def update_user(
        self, plane: Plane, actor: Actor, username: FromPath[str], data: JSONBody[UserPatch]
    ) -> UserOut:
        user = await plane.users.update(
            username,
            role=data.role if data.role is not UNSET else None,
            disabled=data.disabled if data.disabled is not UNSET else None,
            password=data.password if data.password is not UNSET else None,
            actor=actor,
        )
        return user_out(user)


class KeyController(Controller):
    path = "/keys"

    @get("/", summary="List API keys (never the keys)", opt=ADMIN, responses=error_responses())
    async def list_keys(self, plane: Plane) -> list[KeyOut]:
        return [key_out(k) for k in await plane.keys.list()]

    @post(
        "/",
        summary="Create an API key",
        description="The answer carries the key, this once; only its hash is stored.",
        opt=ADMIN,
        responses=error_responses(400, 409),
    )
    async def create_key(self, plane: Plane, actor: Actor, data: JSONBody[KeyIn]) -> KeyCreated:
        priority = Priority.BATCH if data.priority == "batch" else Priority.INTERACTIVE
        record, plaintext = await plane.keys.create(
            data.name, priority, data.models, data.rate_limit_per_minute, actor=actor
        )
        out = key_out(record)
        return KeyCreated(
            name=out.name,
            key_prefix=out.key_prefix,
            priority=out.priority,
            models=out.models,
            rate_limit_per_minute=out.rate_limit_per_minute,
            created_at=out.created_at,
            revoked_at=out.revoked_at,
            key=plaintext,
        )

    @post(
        "/{name:str}/revoke",
        summary="Revoke an API key",
        opt=ADMIN,
        status_code=200,
        responses=error_responses(404, 409),
    )
    async def revoke_key(self, plane: Plane, actor: Actor, name: FromPath[str]) -> KeyOut:
        return key_out(await plane.keys.revoke(name, actor=actor))
