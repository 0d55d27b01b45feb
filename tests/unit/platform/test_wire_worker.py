"""The gateway<->worker records across JSON: typed both ways."""

from __future__ import annotations

import msgspec

from vigil.engine.precision import Precision
from vigil.engine.stats import EngineStats, StepStats
from vigil.platform.wire.worker import Heartbeat, PrecisionWire, SlotReport, StatsWire


def test_an_engines_stats_cross_the_heartbeat_as_fields_without_the_last_step() -> None:
    step = StepStats(4, 4, 4, 0.001, 0.001, 0.01, 0.001, 0.001)
    stats = EngineStats(2, 1, 4, 200, 50, 10, 3, 640, 320, 99, step)
    sent = Heartbeat([SlotReport("m@v", "ready", 1.0, stats=StatsWire.of(stats))])
    got = msgspec.json.decode(msgspec.json.encode(sent), type=Heartbeat).slots[0].stats
    assert got is not None
    read = got.stats()
    assert read == EngineStats(2, 1, 4, 200, 50, 10, 3, 640, 320, 99, None)
    assert (read.num_waiting, read.num_running, read.kv_cache_usage) == (3, 4, 0.25)


def test_what_a_slot_runs_as_crosses_the_heartbeat_in_one_word_and_with_its_reason() -> None:
    int4 = Precision("int4", "float32", "auto: 4-bit file", keep_finer=True)
    sent = Heartbeat([SlotReport("m@v", "ready", 1.0, precision=PrecisionWire.of(int4))])
    got = msgspec.json.decode(msgspec.json.encode(sent), type=Heartbeat).slots[0].precision
    assert got == PrecisionWire("int4", "int4", "float32", "auto: 4-bit file")
    floats = PrecisionWire.of(Precision("none", "bfloat16", "auto on cuda"))
    assert (floats.runs_as, floats.quantization) == ("bfloat16", "none")
    assert Heartbeat([SlotReport("m@v", "loading")]).slots[0].precision is None
