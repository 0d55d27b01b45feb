"""`/api/admin/deployments`: deployments, canaries and SLOs. Thin: validate -> service ->
body. Writes that carry a `revision` are refused with 409 when it is stale."""

from __future__ import annotations

from litestar import Controller, get, patch, post, put
from litestar.params import FromPath, JSONBody

from vigil.platform.api.admin.deps import Actor, Plane
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.api.admin.schemas import (
    ActionIn,
    CanaryIn,
    DeploymentIn,
    DeploymentOut,
    DeploymentPatch,
    SLOBody,
)
from vigil.platform.api.admin.views import (
    deployment_out,
    new_draft,
    patched_draft,
    slo_body,
    slo_targets,
)
from vigil.platform.control.access.records import Role
from vigil.platform.control.deployments.records import VersionKey

OPERATOR = {"role": Role.OPERATOR}
WRITE_ERRORS = error_responses(400, 404, 409)


class DeploymentController(Controller):
    path = "/deployments"

    @get("/", summary="List deployments", responses=error_responses())
    async def list_deployments(self, plane: Plane) -> list[DeploymentOut]:
        return [deployment_out(d) for d in await plane.deployments.list()]

    @post(
        "/",
        summary="Create a deployment",
        opt=OPERATOR,
        responses=error_responses(400, 409),
    )
    async def create_deployment(
        self, plane: Plane, actor: Actor, data: JSONBody[DeploymentIn]
    ) -> DeploymentOut:
        slo = slo_targets(data.slo) if data.slo is not None else None
        record = await plane.deployments.create(data.name, new_draft(data), slo=slo, actor=actor)
        return deployment_out(record)

    @get("/{name:str}", summary="A deployment", responses=error_responses(404))
    async def get_deployment(self, plane: Plane, name: FromPath[str]) -> DeploymentOut:
        return deployment_out(await plane.deployments.get(name))

    @patch(
        "/{name:str}",
        summary="Change a deployment",
        description="Send the `revision` you read; fields left out keep their value and "
        "null clears one. A stale revision gets 409 naming the current one.",
        opt=OPERATOR,
        responses=WRITE_ERRORS,
    )
    async def update_deployment(
        self, plane: Plane, actor: Actor, name: FromPath[str], data: JSONBody[DeploymentPatch]
    ) -> DeploymentOut:
        current = await plane.deployments.get(name)
        draft = patched_draft(current.draft, data)
        record = await plane.deployments.update(name, draft, revision=data.revision, actor=actor)
        return deployment_out(record)

    @post(
        "/{name:str}/canary",
        summary="Set the canary version and its share of traffic",
        opt=OPERATOR,
        status_code=200,
        responses=WRITE_ERRORS,
    )
    async def set_canary(
        self, plane: Plane, actor: Actor, name: FromPath[str], data: JSONBody[CanaryIn]
    ) -> DeploymentOut:
        model = data.model
        if model is None:
            model = (await plane.deployments.get(name)).spec.stable.model
        record = await plane.deployments.set_canary(
            name, VersionKey(model, data.version), data.weight, revision=data.revision, actor=actor
        )
        return deployment_out(record)

    @post(
        "/{name:str}/promote",
        summary="Make the canary the stable version",
        opt=OPERATOR,
        status_code=200,
        responses=WRITE_ERRORS,
    )
    async def promote(
        self,
        plane: Plane,
        actor: Actor,
        name: FromPath[str],
        data: JSONBody[ActionIn | None] = None,
    ) -> DeploymentOut:
        revision = data.revision if data is not None else None
        return deployment_out(await plane.deployments.promote(name, revision=revision, actor=actor))

    @post(
        "/{name:str}/rollback",
        summary="Drop the canary",
        opt=OPERATOR,
        status_code=200,
        responses=WRITE_ERRORS,
    )
    async def rollback(
        self,
        plane: Plane,
        actor: Actor,
        name: FromPath[str],
        data: JSONBody[ActionIn | None] = None,
    ) -> DeploymentOut:
        revision = data.revision if data is not None else None
        record = await plane.deployments.rollback(name, revision=revision, actor=actor)
        return deployment_out(record)

    @get("/{name:str}/slo", summary="A deployment's SLO targets", responses=error_responses(404))
    async def get_slo(self, plane: Plane, name: FromPath[str]) -> SLOBody:
        return slo_body(await plane.deployments.get_slo(name))

    @put(
        "/{name:str}/slo",
        summary="Set a deployment's SLO targets",
        opt=OPERATOR,
        responses=error_responses(400, 404),
    )
    async def set_slo(
        self, plane: Plane, actor: Actor, name: FromPath[str], data: JSONBody[SLOBody]
    ) -> SLOBody:
        slo = await plane.deployments.set_slo(name, slo_targets(data), actor=actor)
        return slo_body(slo)
