"""`/api/admin/webhooks`: where alerts go: the controller, its bodies, and the mapping
from the webhooks domain's records. The secret is in the answer to the POST that
created the webhook, and never again (listings carry a hint)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, JSONBody
from msgspec import UNSET, Meta, Struct, UnsetType, convert
from msgspec.structs import asdict

from vigil.platform.api.admin.auth import OPERATOR
from vigil.platform.api.admin.bodies import In, Name, given
from vigil.platform.api.admin.deps import Actor, Plane
from vigil.platform.api.admin.responses import error_responses, write_responses
from vigil.platform.control.webhooks.records import WebhookRecord


class WebhookIn(In):
    name: Name
    url: Annotated[str, Meta(min_length=1, max_length=2000)]
    events: list[str]  # slo.burn, slo.recovered, shed, fallback, canary.rollback, worker.down
    secret: str | None = None  # default: generated, and shown once in the answer
    enabled: bool = True


class WebhookPatch(In):
    url: str | UnsetType = UNSET
    events: list[str] | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET


class WebhookOut(Struct, kw_only=True):
    name: str
    url: str
    events: list[str]
    enabled: bool
    secret_hint: str
    created_at: datetime


class WebhookCreated(WebhookOut, kw_only=True):
    secret: str  # shown this once


def webhook_out(w: WebhookRecord) -> WebhookOut:
    return convert(w, WebhookOut, from_attributes=True)


class WebhookController(Controller):
    path = "/webhooks"

    @get("/", summary="List webhooks", responses=error_responses())
    async def list_webhooks(self, plane: Plane) -> list[WebhookOut]:
        return [webhook_out(w) for w in await plane.webhooks.list()]

    @post("/", summary="Create a webhook", opt=OPERATOR, responses=write_responses(400, 409))
    async def create_webhook(
        self, plane: Plane, actor: Actor, data: JSONBody[WebhookIn]
    ) -> WebhookCreated:
        record, secret = await plane.webhooks.create(
            data.name,
            data.url,
            data.events,
            secret=data.secret,
            enabled=data.enabled,
            actor=actor,
        )
        return WebhookCreated(**asdict(webhook_out(record)), secret=secret)

    @patch(
        "/{name:str}",
        summary="Change a webhook",
        opt=OPERATOR,
        responses=write_responses(400, 404),
    )
    async def update_webhook(
        self, plane: Plane, actor: Actor, name: FromPath[str], data: JSONBody[WebhookPatch]
    ) -> WebhookOut:
        record = await plane.webhooks.update(
            name,
            url=given(data.url),
            events=given(data.events),
            enabled=given(data.enabled),
            actor=actor,
        )
        return webhook_out(record)

    @delete(
        "/{name:str}",
        summary="Delete a webhook",
        opt=OPERATOR,
        status_code=200,
        responses=write_responses(404),
    )
    async def delete_webhook(self, plane: Plane, actor: Actor, name: FromPath[str]) -> WebhookOut:
        return webhook_out(await plane.webhooks.delete(name, actor=actor))
