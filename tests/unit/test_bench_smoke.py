"""The engine benchmarks run (on toy sizes) and what they assert holds: a benchmark that
no longer runs measures nothing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "ops" / "bench" / "engine_bench.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("engine_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_kv_bytes_per_token_equal_the_formula(bench: ModuleType, smollm2, capsys) -> None:
    bench.bench_kv(smollm2, budget_bytes=64 << 20)
    out = capsys.readouterr().out
    assert "46080" in out  # 2 x 30 layers x 3 KV heads x 64 x 4 bytes


def test_overhead_and_embedding_benchmarks_print_their_tables(
    bench: ModuleType, smollm2, minilm, capsys
) -> None:
    bench.bench_overhead(smollm2, batch=2, steps=2)
    bench.bench_embed(minilm, clients=4, per_client=2)
    out = capsys.readouterr().out
    assert "outside forward" in out and "p99 wait ms" in out


def test_engine_runs_report_throughput_and_ttft(bench: ModuleType, smollm2) -> None:
    config = bench.EngineConfig(max_num_seqs=4, enable_prefix_caching=True)
    prompts = bench.random_prompts(2, 16, seed=0)
    result = bench.run_engine(smollm2, prompts, 3, config)
    assert result.tokens_per_s > 0 and len(result.ttfts_s) == 2


def test_soak_quick_reports_rss_kv_blocks_and_a_verdict(vigil_server, capsys) -> None:  # type: ignore[no-untyped-def]
    """The soak's --quick run against the shared server: every reading it prints comes
    from that server's processes and /metrics."""
    import argparse

    path = BENCH.with_name("soak.py")
    spec = importlib.util.spec_from_file_location("soak", path)
    assert spec is not None and spec.loader is not None
    soak = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = soak
    spec.loader.exec_module(soak)
    args = argparse.Namespace(
        url=vigil_server.base_url,
        quick=True,
        minutes=0.1,
        share=0.7,
        clients=4,
        probe_s=3.0,
        sample_s=1.0,
        tokens=4,
        max_slope=1000.0,  # seconds of samples say nothing of a trend: the table is checked
    )
    flat = soak.run(args)
    out = capsys.readouterr().out
    assert "gateway" in out and "worker-0" in out and "slope MB/min" in out, out
    assert "KV free blocks at idle: before" in out and "verdict:" in out, out
    assert flat, out  # the KV blocks came back once idle
    assert soak.slope_mb_per_min([(0, 100.0), (60, 103.0), (120, 106.0)]) == 3.0


def test_plan_check_prints_predicted_against_measured() -> None:
    """The planner's check, --quick: a real `vigil serve`, warmed, planned, then loaded."""
    import subprocess

    script = BENCH.with_name("plan_check.py")
    done = subprocess.run(
        [sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=540
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "measured rates:" in out and "planner's max for one worker" in out
    row = out.strip().splitlines()[-1].split()
    assert row[0] == "0.50" and int(row[2]) > 0  # a load was run and served
