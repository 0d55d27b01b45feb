"""ops/alertmanager/alertmanager.yml, the routing example: valid to amtool, and every
alert Vigil can raise (the Prometheus rules' and Vigil's own webhooks') reaches the
receiver its severity names, as amtool routes it."""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from vigil.platform.control.alerts.records import AlertRecord, DecisionRecord

OPS = Path(__file__).parents[2] / "ops"
CONFIG = OPS / "alertmanager" / "alertmanager.yml"
RECEIVER_OF = {"page": "vigil-page", "ticket": "vigil-ticket", "info": "vigil-info"}


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("amtool")
    assert tool, "amtool is missing: ops/install.sh --test installs prometheus-alertmanager"
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)


def _routed(labels: dict[str, str]) -> str:
    pairs = [f"{k}={v}" for k, v in labels.items()]
    out = amtool("config", "routes", "test", f"--config.file={CONFIG}", *pairs)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip()


def _rule_alerts() -> list[dict[str, str]]:
    labels = []
    for path in sorted((OPS / "prometheus").glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    labels.append({"alertname": rule["alert"], **rule["labels"]})
    return labels


def _vigil_alerts() -> list[dict[str, str]]:
    now = datetime.now(UTC)
    slo = [
        AlertRecord(1, "f", "chat", "ttft", severity, "firing", now, None, "s", {})
        for severity in ("page", "ticket")
    ]
    decisions = [
        DecisionRecord(1, now, "chat", kind, "on", "r", {}) for kind in ("shed_batch", "fallback")
    ]
    rollback = DecisionRecord(1, now, "chat", "rollback", "rolled_back", "r", {})
    return [
        *(a.message()["labels"] for a in slo),
        *(d.message(True)["labels"] for d in decisions),
        rollback.message(None)["labels"],
    ]


def test_the_routing_example_is_valid() -> None:
    checked = amtool("check-config", str(CONFIG))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("source", ["rules", "vigil"])
def test_every_alert_reaches_the_receiver_of_its_severity(source: str) -> None:
    alerts = _rule_alerts() if source == "rules" else _vigil_alerts()
    assert alerts
    for labels in alerts:
        assert _routed(labels) == RECEIVER_OF[labels["severity"]], labels


def test_vigils_test_event_is_dropped() -> None:
    assert _routed({"alertname": "VigilTest", "service": "vigil", "severity": "none"}) == "null"
