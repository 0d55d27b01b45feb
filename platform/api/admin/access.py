"""`/api/admin/users` and `/api/admin/keys`: who may sign in, and the API keys of the
OpenAI-compatible API (admins only, reading included): the controllers, their bodies,
and the mapping from the access domain's records."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, cast

from litestar import Controller, get, patch, post
from litestar.params import FromPath, JSONBody
from msgspec import UNSET, Meta, Struct, UnsetType, convert
from msgspec.structs import asdict

from vigil.engine.request import Priority
from vigil.platform.api.admin.auth import ADMIN
from vigil.platform.api.admin.bodies import In, Name, PositiveInt, given
from vigil.platform.api.admin.deps import Actor, Plane
from vigil.platform.api.admin.responses import error_responses, write_responses
from vigil.platform.control.access.records import ApiKeyRecord, Role, UserRecord

# Priority.label of each class, as the schema lists them.
PriorityName = Literal["interactive", "batch"]
Password = Annotated[str, Meta(min_length=1, max_length=1024)]


class UserIn(In):
    username: Name
    password: Password
    role: Role = Role.VIEWER


class UserPatch(In):
    role: Role | UnsetType = UNSET
    disabled: bool | UnsetType = UNSET
    password: Password | UnsetType = UNSET


class UserOut(Struct, kw_only=True):
    username: str
    role: Role
    created_at: datetime
    disabled_at: datetime | None


class KeyIn(In):
    name: Name
    priority: PriorityName = "interactive"
    models: list[str] | None = None  # deployments it may use; null: all
    rate_limit_per_minute: PositiveInt | None = None


class KeyOut(Struct, kw_only=True):
    name: str
    key_prefix: str
    priority: PriorityName
    models: list[str] | None
    rate_limit_per_minute: int | None
    created_at: datetime
    revoked_at: datetime | None


class KeyCreated(KeyOut, kw_only=True):
    key: str  # shown this once; only its hash is stored


def user_out(u: UserRecord) -> UserOut:
    return convert(u, UserOut, from_attributes=True)


def key_out(k: ApiKeyRecord) -> KeyOut:
    return KeyOut(
        name=k.name,
        key_prefix=k.key_prefix,
        priority=cast(PriorityName, k.priority.label),
        models=sorted(k.models) if k.models is not None else None,
        rate_limit_per_minute=k.rate_limit_per_minute,
        created_at=k.created_at,
        revoked_at=k.revoked_at,
    )


class UserController(Controller):
    path = "/users"

    @get("/", summary="List users", opt=ADMIN, responses=error_responses())
    async def list_users(self, plane: Plane) -> list[UserOut]:
        return [user_out(u) for u in await plane.users.list()]

    @post("/", summary="Create a user", opt=ADMIN, responses=write_responses(400, 409))
    async def create_user(self, plane: Plane, actor: Actor, data: JSONBody[UserIn]) -> UserOut:
        user = await plane.users.create(data.username, data.password, data.role, actor=actor)
        return user_out(user)

    @patch(
        "/{username:str}",
        summary="Change a user's role, password, or disable them",
        opt=ADMIN,
        responses=write_responses(400, 404, 409),
    )
    async def update_user(
        self, plane: Plane, actor: Actor, username: FromPath[str], data: JSONBody[UserPatch]
    ) -> UserOut:
        user = await plane.users.update(
            username,
            role=given(data.role),
            disabled=given(data.disabled),
            password=given(data.password),
            actor=actor,
        )
        return user_out(user)

    @post(
        "/{username:str}/sign-out",
        summary="End every console session of a user",
        description="Their browsers are signed out at their next request; a password "
        "change or disabling them does this too.",
        opt=ADMIN,
        status_code=200,
        responses=write_responses(404),
    )
    async def sign_out_user(self, plane: Plane, actor: Actor, username: FromPath[str]) -> UserOut:
        return user_out(await plane.users.sign_out_everywhere(username, actor=actor))


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
        responses=write_responses(400, 409),
    )
    async def create_key(self, plane: Plane, actor: Actor, data: JSONBody[KeyIn]) -> KeyCreated:
        priority = Priority.from_label(data.priority)
        assert priority is not None, "the body's schema admits class labels only"
        record, plaintext = await plane.keys.create(
            data.name, priority, data.models, data.rate_limit_per_minute, actor=actor
        )
        return KeyCreated(**asdict(key_out(record)), key=plaintext)

    @post(
        "/{name:str}/revoke",
        summary="Revoke an API key",
        opt=ADMIN,
        status_code=200,
        responses=write_responses(404, 409),
    )
    async def revoke_key(self, plane: Plane, actor: Actor, name: FromPath[str]) -> KeyOut:
        return key_out(await plane.keys.revoke(name, actor=actor))
