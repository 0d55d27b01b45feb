"""The console charts' history in its file (telemetry/series_file.py): what a gateway
drew before a restart is drawn again after it, for the charts' 15 minutes and no
longer, and a damaged file costs only that history."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from fakes import FakeWorkers, ScriptedEngine, gateway_client

from vigil.engine.bundled import SMOLLM2
from vigil.platform.control.specs import bundled_version
from vigil.platform.telemetry.deployments import DeploymentSeries, EngineGauges
from vigil.platform.telemetry.series_file import WINDOW_S, SeriesFile

STABLE = bundled_version(SMOLLM2).key


def drawn(now_ts: float) -> DeploymentSeries:
    series = DeploymentSeries()
    roles = {"stable": "m@1", "canary": "m@2"}
    for t in range(5):
        series.add_tokens("chat", 10, "m@2")
        series.add_shed("chat", "queue_full")
        series.sample("chat", EngineGauges(t, 0, 1, 0.1), 1.0, roles=roles, now_ts=now_ts + t)
    return series


def test_the_points_come_back_after_a_restart(tmp_path: Path) -> None:
    before = drawn(100.0)
    SeriesFile(tmp_path / "console-series.json", before).save()
    after = DeploymentSeries()
    assert SeriesFile(tmp_path / "console-series.json", after).load() == 5
    assert after.points("chat") == before.points("chat")
    last = after.points("chat")[-1]
    assert last.versions["canary"].version == "m@2" and last.shed_per_s["queue_full"] == 1.0
    # New points follow the restored ones.
    after.sample("chat", EngineGauges(), 1.0, now_ts=200.0)
    assert after.points("chat")[:5] == before.points("chat") and len(after.points("chat")) == 6


def test_points_older_than_the_charts_window_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "console-series.json"
    SeriesFile(path, drawn(100.0)).save()
    newest = drawn(100.0).points("chat")[-1].wall_ts
    later = DeploymentSeries()
    assert SeriesFile(path, later).load(now_wall_s=time.time() + WINDOW_S + 60) == 0
    assert later.points("chat") == []
    assert SeriesFile(path, later).load(now_wall_s=newest + WINDOW_S - 0.5) >= 1


def test_a_damaged_or_missing_file_starts_the_charts_empty(tmp_path: Path) -> None:
    series = DeploymentSeries()
    assert SeriesFile(tmp_path / "none.json", series).load() == 0
    damaged = tmp_path / "console-series.json"
    damaged.write_text('{"chat": [{"wall_ts": "yesterday"}]}')
    assert SeriesFile(damaged, series).load() == 0 and series.points("chat") == []


async def test_a_restarted_gateway_draws_the_points_it_drew_before(
    tmp_path: Path, smollm2_tokenizer: Any
) -> None:
    workers = FakeWorkers()
    workers.add("w1", {STABLE: ScriptedEngine(auto_release=True)})
    async with gateway_client(tmp_path, workers, smollm2_tokenizer) as (gateway, _):
        for _ in range(600):  # the sampler's first points, however busy the machine
            if len(gateway.services.series.points(SMOLLM2)) >= 2:
                break
            await asyncio.sleep(0.05)
        before = gateway.services.series.points(SMOLLM2)
    assert len(before) >= 2 and (tmp_path / "console-series.json").exists()
    async with gateway_client(tmp_path, FakeWorkers(), smollm2_tokenizer) as (gateway, client):
        after = gateway.services.series.points(SMOLLM2)
        page = (await client.get("/console/")).text
    assert after[: len(before)] == before
    assert f'"wall_ts": {before[0].wall_ts}' in page or str(before[0].wall_ts) in page
