"""ops/grafana/vigil.json is a dashboard Grafana imports as it is: every query goes to
the `${datasource}` variable, panels do not overlap, and it covers what an operator
watches. (tests/integration/test_ops_kit.py runs every query on a real Prometheus.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).parents[2] / "ops" / "grafana" / "vigil.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def load() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def test_every_query_uses_the_datasource_variable() -> None:
    dashboard = load()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("deployment", "version"):
        assert variables[name]["datasource"] == DATASOURCE
        assert variables[name]["definition"].startswith("label_values(")
    assert "$deployment" in variables["version"]["definition"]
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = load()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, p["title"]
        cells |= mine


def test_it_covers_what_an_operator_watches() -> None:
    exprs = " ".join(t["expr"] for p in load()["panels"] for t in p.get("targets", []))
    for series in (
        "vigil_requests_waiting",
        "vigil_requests_running",
        "vigil_kv_cache_usage_ratio",
        "vigil_time_to_first_token_seconds_bucket",
        "vigil_slo_ttft_target_seconds",
        "vigil_generation_tokens_total",
        "vigil_requests_total",
        "vigil_admission_decisions_total",
        "vigil_worker_heartbeat_age_seconds",
        "vigil_worker_up",
        "vigil_slo_error_budget_remaining_ratio",
        "vigil_slo_burn_rate",
        "vigil_slo_error_ratio_rate5m",
    ):
        assert series in exprs, series
    exemplars = [t for p in load()["panels"] for t in p.get("targets", []) if t.get("exemplar")]
    assert exemplars and all("_seconds_bucket" in t["expr"] for t in exemplars)
