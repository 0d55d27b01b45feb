"""`/api/admin/webhooks`: where alerts go. The secret is in the answer to the POST that
created the webhook, and never again (listings carry a hint)."""

from __future__ import annotations

from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, JSONBody
from msgspec import UNSET

from vigil.platform.api.admin.deps import Actor, Plane
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.api.admin.schemas import WebhookCreated, WebhookIn, WebhookOut, WebhookPatch
from vigil.platform.api.admin.views import webhook_out
from vigil.platform.control.access.records import Role

OPERATOR = {"role": Role.OPERATOR}


class WebhookController(Controller):
    path = "/webhooks"

    @get("/", summary="List webhooks", responses=error_responses())
    async def list_webhooks(self, plane: Plane) -> list[WebhookOut]:
        return [webhook_out(w) for w in await plane.webhooks.list()]

    @post("/", summary="Create a webhook", opt=OPERATOR, responses=error_responses(400, 409))
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
        out = webhook_out(record)
        return WebhookCreated(
            name=out.name,
            url=out.url,
            events=out.events,
            enabled=out.enabled,
            secret_hint=out.secret_hint,
            created_at=out.created_at,
            secret=secret,
        )

    @patch(
        "/{name:str}",
        summary="Change a webhook",
        opt=OPERATOR,
        responses=error_responses(400, 404),
    )
    async def update_webhook(
        self, plane: Plane, actor: Actor, name: FromPath[str], data: JSONBody[WebhookPatch]
    ) -> WebhookOut:
        record = await plane.webhooks.update(
            name,
            url=data.url if data.url is not UNSET else None,
            events=data.events if data.events is not UNSET else None,
            enabled=data.enabled if data.enabled is not UNSET else None,
            actor=actor,
        )
        return webhook_out(record)

    @delete(
        "/{name:str}",
        summary="Delete a webhook",
        opt=OPERATOR,
        status_code=200,
        responses=error_responses(404),
    )
    async def delete_webhook(self, plane: Plane, actor: Actor, name: FromPath[str]) -> WebhookOut:
        return webhook_out(await plane.webhooks.delete(name, actor=actor))
