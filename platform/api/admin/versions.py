"""`/api/admin/models`: models and their versions: the controller (thin: validate ->
service -> body), its bodies, and the mapping from the versions domain's records."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Annotated, Any

from litestar import Controller, get, post
from litestar.params import FromPath, JSONBody
from msgspec import Meta, Struct, convert, field
from msgspec.structs import asdict

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.platform.api.admin.auth import OPERATOR
from vigil.platform.api.admin.bodies import In, Name, VersionName
from vigil.platform.api.admin.deps import Actor, Plane
from vigil.platform.api.admin.responses import error_responses, write_responses
from vigil.platform.control.versions.records import ModelRecord, VersionRecord, VersionStatus


class ModelIn(In):
    name: Name
    kind: ModelKind = ModelKind.GENERATE
    description: Annotated[str, Meta(max_length=2000)] | None = None


class VersionIn(In):
    version: VersionName
    artifact: Annotated[str, Meta(min_length=1, max_length=1000)]  # bundled:<name> or a path
    format: ModelFormat | None = None  # default: from the artifact
    checksum: Annotated[str, Meta(pattern="^[0-9a-fA-F]{64}$")] | None = None  # SHA-256
    # dtype, quantization, temperature, top_p, top_k, max_tokens, stop, tool_parser
    params: dict[str, Any] = field(default_factory=dict)


class ModelOut(Struct, kw_only=True):
    name: str
    kind: ModelKind
    description: str | None
    created_at: datetime


class VersionOut(Struct, kw_only=True):
    model: str
    version: str
    key: str  # model@version, as metrics and x-vigil-served-by name it
    kind: ModelKind
    format: ModelFormat
    artifact: str
    checksum: str | None
    params: dict[str, Any]
    status: VersionStatus
    error: str | None
    source: str  # where a worker last loaded it from
    created_at: datetime
    updated_at: datetime


class ModelDetailOut(ModelOut, kw_only=True):
    versions: list[VersionOut]


def model_out(m: ModelRecord) -> ModelOut:
    return convert(m, ModelOut, from_attributes=True)


def version_out(v: VersionRecord) -> VersionOut:
    """The version's fields and its ref's side by side; params as an object."""
    fields = dataclasses.asdict(v)
    served = fields.pop("ref") | {"key": v.ref.key, "params": dict(v.ref.params)}
    return VersionOut(**served, **fields)


class ModelController(Controller):
    path = "/models"

    @get("/", summary="List models", responses=error_responses())
    async def list_models(self, plane: Plane) -> list[ModelOut]:
        return [model_out(m) for m in await plane.versions.list_models()]

    @post("/", summary="Register a model", opt=OPERATOR, responses=write_responses(400, 409))
    async def register_model(self, plane: Plane, actor: Actor, data: JSONBody[ModelIn]) -> ModelOut:
        model = await plane.versions.register_model(
            data.name, data.kind, data.description, actor=actor
        )
        return model_out(model)

    @get("/{name:str}", summary="A model and its versions", responses=error_responses(404))
    async def get_model(self, plane: Plane, name: FromPath[str]) -> ModelDetailOut:
        model = await plane.versions.get_model(name)
        versions = [version_out(v) for v in await plane.versions.list_versions(name)]
        return ModelDetailOut(**asdict(model_out(model)), versions=versions)

    @get("/{name:str}/versions", summary="List a model's versions", responses=error_responses(404))
    async def list_versions(self, plane: Plane, name: FromPath[str]) -> list[VersionOut]:
        return [version_out(v) for v in await plane.versions.list_versions(name)]

    @post(
        "/{name:str}/versions",
        summary="Register a version",
        description="The artifact is `bundled:<name>`, a GGUF file or a Hugging Face folder "
        "on the control plane's host. Its SHA-256 is computed, or verified when `checksum` "
        "is given (a mismatch is a 400 with code `checksum_mismatch`).",
        opt=OPERATOR,
        responses=write_responses(400, 404, 409),
    )
    async def register_version(
        self, plane: Plane, actor: Actor, name: FromPath[str], data: JSONBody[VersionIn]
    ) -> VersionOut:
        version = await plane.versions.register_version(
            name,
            data.version,
            data.artifact,
            format=data.format,
            checksum=data.checksum,
            params=data.params,
            actor=actor,
        )
        return version_out(version)

    @post(
        "/{name:str}/versions/{version:str}/retire",
        summary="Retire a version no deployment serves",
        opt=OPERATOR,
        status_code=200,
        responses=write_responses(404, 409),
    )
    async def retire_version(
        self, plane: Plane, actor: Actor, name: FromPath[str], version: FromPath[str]
    ) -> VersionOut:
        return version_out(await plane.versions.retire_version(name, version, actor=actor))
