"""The Prometheus rules in ops/prometheus: valid, passing their own unit tests under
promtool (every alert among them), each alert linking a runbook that exists, and the
same burn-rate rules Vigil evaluates itself (windows, thresholds and the fewest requests
that may alert) for every SLI it alerts on."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from vigil.platform.slo.burn import MIN_EVENTS, WORKBOOK_RULES, Severity, duration_name
from vigil.platform.slo.sli import ALERTING

RULES = Path(__file__).parents[2] / "ops" / "prometheus"
PUBLIC = "https://vigil.example.com"  # the gateway's external URL, as ops/k8s sets it


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: ops/install.sh --test installs Debian's prometheus"
    return subprocess.run([tool, *args], cwd=RULES, capture_output=True, text=True, timeout=60)


RULE_FILES = ["vigil-slo.rules.yml", "vigil-ops.rules.yml"]
RUNBOOKS = Path(__file__).parents[2] / "docs" / "runbooks"


@pytest.mark.parametrize("rules", RULE_FILES)
def test_the_rules_are_valid_and_pass_their_tests(rules: str) -> None:
    checked = promtool("check", "rules", rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", rules.replace(".yml", ".test.yml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def _alerts(rules: str) -> list[dict[str, Any]]:
    groups = yaml.safe_load((RULES / rules).read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


@pytest.mark.parametrize("rules", RULE_FILES)
def test_every_alert_is_unit_tested_and_links_a_runbook_that_exists(rules: str) -> None:
    tests = yaml.safe_load((RULES / rules.replace(".yml", ".test.yml")).read_text())["tests"]
    tested = {t["alertname"] for case in tests for t in case.get("alert_rule_test", [])}
    for alert in _alerts(rules):
        assert alert["alert"] in tested, alert["alert"]
        url = alert["annotations"]["runbook_url"]
        assert url.startswith(f"{PUBLIC}/runbooks/"), url
        assert (RUNBOOKS / f"{url.rsplit('/', 1)[1]}.md").is_file(), url


def test_prometheus_burns_on_the_same_windows_and_thresholds_as_vigil() -> None:
    groups = yaml.safe_load((RULES / "vigil-slo.rules.yml").read_text())["groups"]
    records = {r["record"]: r for g in groups for r in g["rules"] if "record" in r}
    expected = {Severity.PAGE: "vigil_slo_burn_page", Severity.TICKET: "vigil_slo_burn_ticket"}
    # Every SLI Vigil alerts on has an alert of each severity on its condition.
    alerts = _alerts("vigil-slo.rules.yml")
    for sli in ALERTING:
        for severity, record in expected.items():
            assert any(
                a["labels"]["severity"] == severity.value
                and a["expr"].startswith(record)
                and re.search(rf'sli(=~"[^"]*\b|="){sli.value}\b', a["expr"])
                for a in alerts
            ), (sli, severity)
    for rule in WORKBOOK_RULES:
        alert = records[expected[rule.severity]]
        long_w, short_w = duration_name(rule.long_s), duration_name(rule.short_s)
        threshold = f"{rule.threshold:g}"
        for window in (long_w, short_w):
            pattern = rf"rate{window} > on \(deployment, sli\) \({threshold} \*"
            assert re.search(pattern, alert["expr"]), (rule, window)
        # As few requests in the short window as Vigil needs before it alerts.
        enough = rf"increase\(vigil_slo_events_total\[{short_w}\]\)\) >= {MIN_EVENTS}(?!\d)"
        assert re.search(enough, alert["expr"]), (rule, short_w)


def test_the_scrape_config_is_valid_and_loads_the_rules() -> None:
    checked = promtool("check", "config", "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = yaml.safe_load((RULES / "prometheus.yml").read_text())
    assert config["rule_files"] == RULE_FILES
    assert {job["job_name"] for job in config["scrape_configs"]} == {
        "vigil-gateway",
        "vigil-workers",
    }
    assert "127.0.0.1" not in (RULES / "prometheus.yml").read_text()
