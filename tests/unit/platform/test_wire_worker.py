"""The gateway<->worker records across JSON: typed both ways."""

from __future__ import annotations

import msgspec

from vigil.engine.stats import EngineStats, StepStats
from vigil.platform.wire.worker import Heartbeat, SlotReport, StatsWire


def test_an_engines_stats_cross_the_heartbeat_as_fields_without_the_last_step() -> None:
    step = StepStats(4, 4, 4, 0.001, 0.001, 0.01, 0.001, 0.001)
    stats = EngineStats(2, 1, 4, 200, 50, 10, 3, 640, 320, 99, step)
    sent = Heartbeat([SlotReport("m@v", "ready", 1.0, stats=StatsWire.of(stats))])
    got = msgspec.json.decode(msgspec.json.encode(sent), type=Heartbeat).slots[0].stats
    assert got is not None
    read = got.stats()
    assert read == EngineStats(2, 1, 4, 200, 50, 10, 3, 640, 320, 99, None)
    assert (read.num_waiting, read.num_running, read.kv_cache_usage) == (3, 4, 0.25)
