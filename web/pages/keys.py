"""API keys, for admins only (reading included, as in the admin API): create one and
see the key this once (only its hash is stored), revoke one."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath
from litestar.response import Template

from vigil.engine.request import Priority
from vigil.platform.control.plane import ControlPlane
from vigil.platform.errors import InvalidRequest
from vigil.web.auth import ADMIN, Actor
from vigil.web.deps import Plane
from vigil.web.forms import form_of, text, whole
from vigil.web.render import render


async def _keys(plane: ControlPlane, **extra: Any) -> dict[str, Any]:
    keys = await plane.keys.list()
    deployments = [d.name for d in await plane.deployments.list()]
    return {"keys": keys, "deployments": deployments, **extra}


class KeysController(Controller):
    path = "/keys"
    opt = ADMIN

    @get("/")
    async def index(self, request: Request[Any, Any, Any], plane: Plane) -> Template:
        return render(request, "keys/index.html", area="keys", **await _keys(plane))

    @post("/")
    async def create(self, request: Request[Any, Any, Any], plane: Plane, actor: Actor) -> Template:
        form = await form_of(request)
        name = text(form, "name")
        assert name is not None
        priority = Priority.from_label(text(form, "priority", required=False) or "interactive")
        if priority is None:
            raise InvalidRequest("'priority' must be interactive or batch.", param="priority")
        models = form.getall("models", []) or None
        rate = whole(form, "rate_limit_per_minute", low=1, required=False)
        record, plaintext = await plane.keys.create(name, priority, models, rate, actor=actor)
        return render(
            request, "keys/_keys.html", **await _keys(plane, created=record, plaintext=plaintext)
        )

    @post("/{name:str}/revoke")
    async def revoke(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        actor: Actor,
        name: FromPath[str],
    ) -> Template:
        await plane.keys.revoke(name, actor=actor)
        return render(
            request,
            "keys/_keys.html",
            flash_message=f"Revoked the key {name}.",
            flash_kind="ok",
            **await _keys(plane),
        )
