"""Alerts and webhooks: the alerts Vigil raised, where they go (create a webhook, and
see its secret this once; turn it on or off; delete it), a test event, and each
webhook's delivery log."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath
from litestar.response import Template

from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.webhooks.records import WebhookEvent, WebhookFormat
from vigil.platform.errors import InvalidRequest
from vigil.web.auth import OPERATOR, Actor
from vigil.web.deps import Plane
from vigil.web.forms import form_of, text
from vigil.web.render import render, viewer_of

EVENTS = [e.value for e in WebhookEvent]
FORMATS = [f.value for f in WebhookFormat]


async def _hooks(
    request: Request[Any, Any, Any], plane: ControlPlane, **extra: Any
) -> dict[str, Any]:
    """The webhooks, their URLs whole only for those who may change them (a URL may
    carry a receiver's credentials; open mode's anonymous readers see it redacted)."""
    may_operate = viewer_of(request).may_operate
    return {
        "webhooks": [w.shown(may_operate=may_operate) for w in await plane.webhooks.list()],
        "events": EVENTS,
        "formats": FORMATS,
        **extra,
    }


class AlertsController(Controller):
    path = "/alerts"

    @get("/")
    async def index(self, request: Request[Any, Any, Any], plane: Plane) -> Template:
        alerts = await plane.alerts.recent(None, 100)
        return render(
            request,
            "alerts/index.html",
            area="alerts",
            firing=alerts,
            **await _hooks(request, plane),
        )

    @post("/webhooks", opt=OPERATOR)
    async def create(self, request: Request[Any, Any, Any], plane: Plane, actor: Actor) -> Template:
        form = await form_of(request)
        name, url = text(form, "name"), text(form, "url")
        assert name is not None and url is not None
        events = form.getall("events", [])
        if not events:
            raise InvalidRequest("Choose at least one event to send.", param="events")
        fmt = text(form, "format", required=False) or WebhookFormat.ALERTMANAGER_WEBHOOK.value
        if fmt not in FORMATS:
            raise InvalidRequest(f"'format' must be one of {', '.join(FORMATS)}.", param="format")
        record, secret = await plane.webhooks.create(
            name, url, events, format=WebhookFormat(fmt), actor=actor
        )
        return render(
            request,
            "alerts/_webhooks.html",
            **await _hooks(request, plane, created=record, secret=secret),
        )

    @post("/webhooks/{name:str}/enabled", opt=OPERATOR)
    async def toggle(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        actor: Actor,
        name: FromPath[str],
    ) -> Template:
        enabled = text(await form_of(request), "enabled") == "true"
        await plane.webhooks.update(name, enabled=enabled, actor=actor)
        return render(request, "alerts/_webhooks.html", **await _hooks(request, plane))

    @post("/webhooks/{name:str}/delete", opt=OPERATOR)
    async def delete(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        actor: Actor,
        name: FromPath[str],
    ) -> Template:
        await plane.webhooks.delete(name, actor=actor)
        return render(
            request,
            "alerts/_webhooks.html",
            flash_message=f"Deleted the webhook {name}.",
            flash_kind="ok",
            **await _hooks(request, plane),
        )

    @post("/webhooks/{name:str}/test", opt=OPERATOR)
    async def send_test(
        self, request: Request[Any, Any, Any], plane: Plane, name: FromPath[str]
    ) -> Template:
        delivery_id = await plane.outbox.send_test(name)
        attempts = await plane.outbox.log(name, 50)
        return render(
            request,
            "alerts/_deliveries.html",
            name=name,
            attempts=attempts,
            flash_message=f"A test event is on its way to {name} (delivery {delivery_id}).",
            flash_kind="ok",
        )

    @get("/webhooks/{name:str}/deliveries")
    async def deliveries(
        self, request: Request[Any, Any, Any], plane: Plane, name: FromPath[str]
    ) -> Template:
        attempts = await plane.outbox.log(name, 50)
        return render(request, "alerts/_deliveries.html", name=name, attempts=attempts)
