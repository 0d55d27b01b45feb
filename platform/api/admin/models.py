"""`/api/admin/models`: models and their versions. Thin: validate -> service -> body."""

from __future__ import annotations

from litestar import Controller, get, post
from litestar.params import FromPath, JSONBody

from vigil.platform.api.admin.deps import Actor, Plane
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.api.admin.schemas import (
    ModelDetailOut,
    ModelIn,
    ModelOut,
    VersionIn,
    VersionOut,
)
from vigil.platform.api.admin.views import model_out, version_out
from vigil.platform.control.access.records import Role

OPERATOR = {"role": Role.OPERATOR}


class ModelController(Controller):
    path = "/models"

    @get("/", summary="List models", responses=error_responses())
    async def list_models(self, plane: Plane) -> list[ModelOut]:
        return [model_out(m) for m in await plane.versions.list_models()]

    @post(
        "/",
        summary="Register a model",
        opt=OPERATOR,
        responses=error_responses(400, 409),
    )
    async def register_model(self, plane: Plane, actor: Actor, data: JSONBody[ModelIn]) -> ModelOut:
        model = await plane.versions.register_model(
            data.name, data.kind, data.description, actor=actor
        )
        return model_out(model)

    @get("/{name:str}", summary="A model and its versions", responses=error_responses(404))
    async def get_model(self, plane: Plane, name: FromPath[str]) -> ModelDetailOut:
        model = await plane.versions.get_model(name)
        versions = await plane.versions.list_versions(name)
        return ModelDetailOut(
            name=model.name,
            kind=model.kind,
            description=model.description,
            created_at=model.created_at,
            versions=[version_out(v) for v in versions],
        )

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
        responses=error_responses(400, 404, 409),
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
        responses=error_responses(404, 409),
    )
    async def retire_version(
        self, plane: Plane, actor: Actor, name: FromPath[str], version: FromPath[str]
    ) -> VersionOut:
        return version_out(await plane.versions.retire_version(name, version, actor=actor))
