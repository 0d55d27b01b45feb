"""What the audit log hands out, and how a snapshot is written as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vigil.platform.control.audit.tables import AuditEntry
from vigil.platform.control.db import aware

Snapshot = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: int
    at: datetime
    actor: str
    action: str  # <entity_type>.<verb>, e.g. deployment.promote
    entity_type: str
    entity_name: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @classmethod
    def of(cls, row: AuditEntry) -> AuditRecord:
        return cls(
            id=row.id,
            at=aware(row.at),
            actor=row.actor,
            action=row.action,
            entity_type=row.entity_type,
            entity_name=row.entity_name,
            before=json.loads(row.before) if row.before is not None else None,
            after=json.loads(row.after) if row.after is not None else None,
        )


def to_json(snapshot: Snapshot | None) -> str | None:
    if snapshot is None:
        return None
    return json.dumps(snapshot, sort_keys=True, separators=(",", ":"), default=str)
