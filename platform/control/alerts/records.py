"""What the alerts domain hands out, and an alert in Alertmanager's shape."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vigil.platform.control.alerts.tables import Alert, Decision
from vigil.platform.control.db import aware

ALERT_NAME = "VigilSLOBurn"
NOT_ENDED = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of an alert still firing


def fingerprint(deployment: str, sli: str, severity: str) -> str:
    """Stable across episodes of the same condition, like Alertmanager's."""
    labels = f"alertname={ALERT_NAME},deployment={deployment},severity={severity},sli={sli}"
    return hashlib.sha256(labels.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class AlertRecord:
    id: int
    fingerprint: str
    deployment: str
    sli: str
    severity: str
    state: str  # firing | resolved
    starts_at: datetime
    ends_at: datetime | None
    summary: str
    details: dict[str, Any]

    @classmethod
    def of(cls, row: Alert) -> AlertRecord:
        return cls(
            row.id,
            row.fingerprint,
            row.deployment,
            row.sli,
            row.severity,
            row.state,
            aware(row.starts_at),
            aware(row.ends_at) if row.ends_at is not None else None,
            row.summary,
            dict(row.details),
        )

    def message(self) -> dict[str, Any]:
        """The alert as Alertmanager's webhook payload and API carry one."""
        return {
            "status": self.state,
            "labels": {
                "alertname": ALERT_NAME,
                "service": "vigil",
                "deployment": self.deployment,
                "sli": self.sli,
                "severity": self.severity,
            },
            "annotations": {
                "summary": self.summary,
                "description": ", ".join(f"{k}={v}" for k, v in sorted(self.details.items())),
            },
            "startsAt": self.starts_at.isoformat(),
            "endsAt": self.ends_at.isoformat() if self.ends_at is not None else NOT_ENDED,
            "generatorURL": f"/api/admin/slo/{self.deployment}",
            "fingerprint": self.fingerprint,
        }


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    id: int
    at: datetime
    deployment: str
    kind: str
    decision: str
    reason: str
    details: dict[str, Any]

    @classmethod
    def of(cls, row: Decision) -> DecisionRecord:
        return cls(
            row.id,
            aware(row.at),
            row.deployment,
            row.kind,
            row.decision,
            row.reason,
            dict(row.details),
        )

    def message(self, ongoing: bool) -> dict[str, Any]:
        """The decision as an alert: firing while its state holds (`ongoing`, e.g. batch
        shed), resolved when it ends or for a one-off (a rollback)."""
        at = self.at.isoformat()
        name = "Vigil" + "".join(part.title() for part in self.kind.split("_"))
        return {
            "status": "firing" if ongoing else "resolved",
            "labels": {
                "alertname": name,
                "service": "vigil",
                "deployment": self.deployment,
                "decision": self.decision,
                "severity": "info",
            },
            "annotations": {"summary": self.reason},
            "startsAt": at,
            "endsAt": NOT_ENDED if ongoing else at,
            "generatorURL": "/api/admin/decisions",
            "fingerprint": hashlib.sha256(f"{name},{self.deployment}".encode()).hexdigest()[:16],
        }
