"""Model versions: register one (artifact, format, and every default a version can
carry: sampling, output cap, stop strings, dtype, quantization, tool parser), each
worker's load state and progress (the table redraws itself every 2 s), a failed load's
error, and retiring a version no deployment serves."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath
from litestar.response import Template

from vigil.engine.bundled import SMOLLM2, ModelFormat, bundled_source
from vigil.engine.model.config import QUANTIZATIONS
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.versions.checks import DTYPES, MAX_STOP_STRINGS, TOOL_PARSERS
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
    """Every default a version can carry, from the fields the operator filled in;
    check_params (the admin API's rules) has the last word on each."""
    params: dict[str, Any] = {
        "temperature": decimal(form, "temperature", low=0, high=2, required=False),
        "top_p": decimal(form, "top_p", low=0, high=1, required=False),
        "top_k": whole(form, "top_k", low=-1, required=False),
        "max_tokens": whole(form, "max_tokens", low=1, required=False),
    }
    for name, allowed in (
        ("dtype", DTYPES),
        ("quantization", QUANTIZATIONS),
        ("tool_parser", TOOL_PARSERS),
    ):
        value = text(form, name, required=False)
        if value is not None and value not in allowed:
            raise InvalidRequest(f"'{name}' must be one of {', '.join(allowed)}.", param=name)
        params[name] = value
    stop = [line for line in (text(form, "stop", required=False) or "").splitlines() if line]
    if len(stop) > MAX_STOP_STRINGS:
        raise InvalidRequest(
            f"'stop' takes at most {MAX_STOP_STRINGS} strings, one a line; it has {len(stop)}.",
            param="stop",
        )
    params["stop"] = stop or None
    return {name: value for name, value in params.items() if value is not None}


def _placeholders() -> dict[str, Any]:
    """What a field left empty means: the bundled chat model's defaults, and the
    engine's where it has none."""
    defaults = dict(bundled_source(SMOLLM2).defaults)
    return {
        "temperature": defaults.get("temperature", 1.0),
        "top_p": defaults.get("top_p", 1.0),
        "top_k": defaults.get("top_k", "0 (none)"),
        "max_tokens": defaults.get("max_tokens", "up to the context"),
    }


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
            dtypes=DTYPES,
            quantizations=QUANTIZATIONS,
            tool_parsers=TOOL_PARSERS,
            max_stop=MAX_STOP_STRINGS,
            placeholders=_placeholders(),
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
