"""What the alerts domain hands out, and an alert in Alertmanager's shape.

An alert keeps one identity from firing to resolved: the same labels, so Alertmanager
(which keys an alert by its labels) resolves the alert it has, and the same fingerprint,
by which the outbox keeps one alert's messages in order. What changes is the status,
and endsAt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vigil.platform.control.alerts.tables import Alert, Decision
from vigil.platform.control.db import aware

ALERT_NAME = "VigilSLOBurn"
NOT_ENDED = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of an alert still firing

# Links are paths on the gateway: the deliverer makes them absolute with the gateway's
# external URL (alerts/links.py), so a message written before that URL changed carries
# the new one. Runbooks are docs/runbooks/<name>.md, served at /runbooks/<name>.
RUNBOOK_OF_SLI = {
    "ttft": "slo-burn",
    "tokens_per_s": "slo-burn",
    "availability": "availability-burn",
    "shed": "interactive-shedding",
}
RUNBOOK_OF_DECISION = {
    "shed_batch": "slo-burn",
    "fallback": "slo-burn",
    "rollback": "canary-rollback",
    "worker": "worker-down",
}


def runbook_path(name: str) -> str:
    return f"/runbooks/{name}"


def fingerprint_of(labels: Mapping[str, str]) -> str:
    """A hash of the labels, like Alertmanager's: stable across episodes of the same
    condition. `service` is left out (every Vigil alert has service=vigil)."""
    text = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "service")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(deployment: str, sli: str, severity: str) -> str:
    """An SLO alert's fingerprint, from its labels."""
    labels = {"alertname": ALERT_NAME, "deployment": deployment, "severity": severity}
    return fingerprint_of(labels | {"sli": sli})


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
                "runbook_url": runbook_path(RUNBOOK_OF_SLI.get(self.sli, "slo-burn")),
            },
            "startsAt": self.starts_at.isoformat(),
            "endsAt": self.ends_at.isoformat() if self.ends_at is not None else NOT_ENDED,
            "generatorURL": f"/console/slos/{self.deployment}",
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

    def message(self, ongoing: bool | None, starts_at: datetime | None = None) -> dict[str, Any]:
        """The decision as an alert. A condition that holds until a later decision ends
        it (batch shed, fallback): firing from now when `ongoing`, else resolved now, with
        the startsAt of the decision that began it (`starts_at`) and the same labels, so
        that both are one alert. A one-off (`ongoing` None, a rollback): resolved at once,
        its decision a label of its own."""
        at = self.at.isoformat()
        name = "Vigil" + "".join(part.title() for part in self.kind.split("_"))
        labels = {"alertname": name, "service": "vigil", "deployment": self.deployment}
        if not self.deployment:  # of the fleet, not of one deployment (a worker lost)
            del labels["deployment"]
        if "worker" in self.details:
            labels["worker"] = str(self.details["worker"])
        if ongoing is None:
            labels["decision"] = self.decision
        labels["severity"] = "info"
        began = starts_at if ongoing is False and starts_at is not None else self.at
        return {
            "status": "firing" if ongoing else "resolved",
            "labels": labels,
            "annotations": {
                "summary": self.reason,
                "runbook_url": runbook_path(RUNBOOK_OF_DECISION.get(self.kind, "slo-burn")),
            },
            "startsAt": began.isoformat(),
            "endsAt": NOT_ENDED if ongoing else at,
            "generatorURL": "/console/decisions",
            "fingerprint": fingerprint_of(labels),
        }
