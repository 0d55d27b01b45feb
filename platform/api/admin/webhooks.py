"""`/api/admin/webhooks`: where alerts go: the controller, its bodies, and the mapping
from the webhooks domain's records. The secret is in the answer to the POST that
created the webhook, and never again (listings carry a hint). A URL may carry a
receiver's credentials: viewers get it redacted (scheme, host and port)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, JSONBody
from msgspec import UNSET, Meta, Struct, UnsetType, convert
from msgspec.structs import asdict

from vigil.platform.api.admin.auth import OPERATOR
from vigil.platform.api.admin.bodies import In, Name, given
from vigil.platform.api.admin.deps import Actor, Plane, User
from vigil.platform.api.admin.responses import error_responses, write_responses
from vigil.platform.control.access.records import Role
from vigil.platform.control.webhooks.records import WebhookFormat, WebhookRecord


class WebhookIn(In):
    name: Name
    url: Annotated[str, Meta(min_length=1, max_length=2000)]
    events: list[str]  # slo.burn, slo.recovered, shed, fallback, canary.rollback, worker.down
    secret: str | None = None  # default: generated, and shown once in the answer
    enabled: bool = True
    format: WebhookFormat = WebhookFormat.ALERTMANAGER_WEBHOOK


class WebhookPatch(In):
    url: str | UnsetType = UNSET
    events: list[str] | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET
    format: WebhookFormat | UnsetType = UNSET


class WebhookOut(Struct, kw_only=True):
    name: str
    url: str
    events: list[str]
    format: WebhookFormat
    enabled: bool
    secret_hint: str
    created_at: datetime


class WebhookCreated(WebhookOut, kw_only=True):
    secret: str  # shown this once


class TestSent(Struct, kw_only=True):
    delivery_id: str  # the X-Vigil-Delivery header the receiver will see


class AttemptOut(Struct, kw_only=True):
    delivery_id: str
    event: str
    at: datetime
    status_code: int | None
    latency_ms: float
    error: str | None
    delivered: bool
    gave_up: bool


def webhook_out(w: WebhookRecord) -> WebhookOut:
    return convert(w, WebhookOut, from_attributes=True)


class WebhookController(Controller):
    path = "/webhooks"

    @get("/", summary="List webhooks", responses=error_responses())
    async def list_webhooks(self, plane: Plane, user: User) -> list[WebhookOut]:
        may_operate = user.may(Role.OPERATOR)
        return [webhook_out(w.shown(may_operate=may_operate)) for w in await plane.webhooks.list()]

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
            format=data.format,
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
            format=given(data.format),
            actor=actor,
        )
        return webhook_out(record)

    @post(
        "/{name:str}/test",
        summary="Send the webhook a test event",
        opt=OPERATOR,
        status_code=202,
        responses=write_responses(404),
    )
    async def send_test(self, plane: Plane, name: FromPath[str]) -> TestSent:
        return TestSent(delivery_id=await plane.outbox.send_test(name))

    @get(
        "/{name:str}/deliveries",
        summary="The webhook's delivery log, newest first",
        responses=error_responses(404),
    )
    async def deliveries(
        self, plane: Plane, name: FromPath[str], limit: Annotated[int, Meta(ge=1, le=1000)] = 100
    ) -> list[AttemptOut]:
        return [
            convert(a, AttemptOut, from_attributes=True)
            for a in await plane.outbox.log(name, limit)
        ]

    @delete(
        "/{name:str}",
        summary="Delete a webhook",
        opt=OPERATOR,
        status_code=200,
        responses=write_responses(404),
    )
    async def delete_webhook(self, plane: Plane, actor: Actor, name: FromPath[str]) -> WebhookOut:
        return webhook_out(await plane.webhooks.delete(name, actor=actor))
