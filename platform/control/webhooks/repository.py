"""The webhooks' SQL: rows are found and listed by name."""

from __future__ import annotations

from vigil.platform.control.db import NamedRepository
from vigil.platform.control.webhooks.tables import Webhook


class WebhookRepository(NamedRepository[Webhook]):
    row_type = Webhook
    name_column = Webhook.name
