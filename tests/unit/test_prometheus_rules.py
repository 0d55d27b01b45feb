"""The Prometheus rules in ops/prometheus: valid, passing their own unit tests under
promtool, and the same burn-rate rules Vigil evaluates itself (windows, thresholds and
the fewest requests that may alert)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from vigil.platform.slo.burn import MIN_EVENTS, WORKBOOK_RULES, Severity, duration_name

RULES = Path(__file__).parents[2] / "ops" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: ops/install.sh --test installs Debian's prometheus"
    return subprocess.run([tool, *args], cwd=RULES, capture_output=True, text=True, timeout=60)


def test_the_rules_are_valid_and_pass_their_tests() -> None:
    checked = promtool("check", "rules", "vigil-slo.rules.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "vigil-slo.rules.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_prometheus_burns_on_the_same_windows_and_thresholds_as_vigil() -> None:
    groups = yaml.safe_load((RULES / "vigil-slo.rules.yml").read_text())["groups"]
    alerts = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    expected = {
        Severity.PAGE: "VigilSLOBurnPage",
        Severity.TICKET: "VigilSLOBurnTicket",
    }
    for rule in WORKBOOK_RULES:
        alert = alerts[expected[rule.severity]]
        assert alert["labels"]["severity"] == rule.severity.value
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
    assert config["rule_files"] == ["vigil-slo.rules.yml"]
    assert {job["job_name"] for job in config["scrape_configs"]} == {
        "vigil-gateway",
        "vigil-workers",
    }
