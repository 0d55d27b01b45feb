"""Model versions: register one (artifact, format, default sampling params), each
worker's load state and progress (the table redraws itself every 2 s), a failed load's
error, and retiring a version no deployment serves."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath
from litestar.response import Template

from vigil.engine.bundled import ModelFormat
from vigil.platform.control.plane import ControlPlane
from vigil.platform.errors import InvalidRequest
from vigil.platform.gateway.workers import WorkerRegistry
from vigil.web.auth import OPERATOR, Actor
from vigil.web.deps import Plane, Workers
from vigil.web.forms import decimal, form_of, text, whole
from vigil.web.render import render

FORMATS = [f.value for f in ModelFormat]


async def _table_context(plane: ControlPlane, workers: WorkerRegistry) -> dict[str, Any]:
    versions = await plane.versions.list_versions()
    replicas = sorted(workers.replicas.values(), key=lambda r: r.id)
    rows = []
    for v in versions:
        loads = []
        for replica in replicas:
            slot = replica.slots.get(v.ref.key)
            if slot is not None:
                loads.append(
                    {
                        "worker": replica.id,
                        "state": slot.state,
                        "progress": slot.progress,
                        "error": slot.error,
                    }
                )
        rows.append({"v": v, "loads": loads})
    return {"rows": rows}


def _params(form: Any) -> dict[str, Any]:
    params: dict[str, Any] = {}
    temperature = decimal(form, "temperature", low=0, high=2, required=False)
    top_p = decimal(form, "top_p", low=0, high=1, required=False)
    top_k = whole(form, "top_k", low=-1, required=False)
    dtype = text(form, "dtype", required=False)
    for name, value in (
        ("temperature", temperature),
        ("top_p", top_p),
        ("top_k", top_k),
        ("dtype", dtype),
    ):
        if value is not None:
            params[name] = value
    return params


class VersionsController(Controller):
    path = "/versions"

    @get("/")
    async def index(
        self, request: Request[Any, Any, Any], plane: Plane, workers: Workers
    ) -> Template:
        models = await plane.versions.list_models()
        return render(
            request,
            "versions/index.html",
            area="versions",
            models=models,
            formats=FORMATS,
            **await _table_context(plane, workers),
        )

    @get("/table")
    async def table(
        self, request: Request[Any, Any, Any], plane: Plane, workers: Workers
    ) -> Template:
        return render(request, "versions/_table.html", **await _table_context(plane, workers))

    @post("/", opt=OPERATOR)
    async def register(
        self, request: Request[Any, Any, Any], plane: Plane, workers: Workers, actor: Actor
    ) -> Template:
        form = await form_of(request)
        model, version, artifact = (
            text(form, "model"),
            text(form, "version"),
            text(form, "artifact"),
        )
        assert model is not None and version is not None and artifact is not None
        fmt = text(form, "format", required=False)
        if fmt is not None and fmt not in FORMATS:
            raise InvalidRequest(f"'format' must be one of {', '.join(FORMATS)}.", param="format")
        record = await plane.versions.register_version(
            model,
            version,
            artifact,
            format=ModelFormat(fmt) if fmt else None,
            params=_params(form),
            actor=actor,
        )
        return render(
            request,
            "versions/_table.html",
            flash_message=f"Registered {record.ref.key}; give it a canary weight of 0 on a "
            "deployment to have the workers load it.",
            flash_kind="ok",
            **await _table_context(plane, workers),
        )

    @post("/{model:str}/{version:str}/retire", opt=OPERATOR)
    async def retire(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        workers: Workers,
        actor: Actor,
        model: FromPath[str],
        version: FromPath[str],
    ) -> Template:
        record = await plane.versions.retire_version(model, version, actor=actor)
        return render(
            request,
            "versions/_table.html",
            flash_message=f"Retired {record.ref.key}.",
            flash_kind="ok",
            **await _table_context(plane, workers),
        )
