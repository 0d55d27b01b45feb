"""A point of the live numbers: every engine for the gateway's own, and for each
deployment the engines of its versions (long-prompt pools included) on every worker."""

from __future__ import annotations

from vigil.engine.bundled import MINILM, SMOLLM2
from vigil.engine.stats import EngineStats
from vigil.platform.control.specs import DeploymentSpec, bundled_version
from vigil.platform.slo.actions import NO_ACTIONS, SLOActions
from vigil.platform.telemetry.deployments import DeploymentSeries
from vigil.platform.telemetry.live import LiveSeries
from vigil.platform.telemetry.metrics import EngineSnapshot
from vigil.platform.telemetry.sampling import LiveSampler

CHAT, SEARCH = bundled_version(SMOLLM2), bundled_version(MINILM)


def stats(waiting: int, running: int, used_blocks: int) -> EngineStats:
    return EngineStats(waiting, 0, running, 100, used_blocks, 0, 0, 0, 0, 0, None)


def test_a_deployments_point_reads_its_versions_engines_and_pools_on_every_worker() -> None:
    snaps = [
        EngineSnapshot(CHAT.key, CHAT.key, "w1", stats(1, 2, 10)),
        EngineSnapshot(CHAT.key, CHAT.key, "w2", stats(2, 3, 20)),
        EngineSnapshot(f"{CHAT.key}#long", CHAT.key, "w1", stats(1, 1, 60)),
        EngineSnapshot(SEARCH.key, SEARCH.key, "w1", stats(5, 0, 90)),
    ]
    specs = [DeploymentSpec("chat", CHAT), DeploymentSpec("search", SEARCH)]
    board = {"chat": SLOActions(shed_batch=True)}
    live, series = LiveSeries(), DeploymentSeries()
    sampler = LiveSampler(
        lambda: snaps, lambda: specs, lambda n: board.get(n, NO_ACTIONS), live, series
    )
    sampler.sample()
    chat = series.latest("chat")
    assert chat is not None
    assert (chat.num_waiting_interactive, chat.num_running, chat.kv_cache_usage) == (4, 6, 0.6)
    assert chat.shedding_batch and not chat.falling_back
    point = live.latest()
    assert point is not None
    assert (point.num_waiting, point.num_running, point.kv_cache_usage) == (9, 6, 0.9)
    specs.pop()  # a deployment gone is forgotten
    sampler.sample()
    assert series.latest("search") is None
