"""The engine benchmarks run (on toy sizes) and what they assert holds: a benchmark that
no longer runs measures nothing."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import httpx
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
    script = BENCH.with_name("plan_check.py")
    done = subprocess.run(
        [sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=540
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "measured rates:" in out and "planner's max for one worker" in out
    row = out.strip().splitlines()[-1].split()
    assert row[0] == "0.50" and int(row[2]) > 0  # a load was run and served


@pytest.fixture(scope="module")
def peer_bench() -> ModuleType:
    folder = str(BENCH.parent)
    sys.path.insert(0, folder)  # it imports its neighbour `serve`
    try:
        spec = importlib.util.spec_from_file_location("peer_bench", BENCH.parent / "peer_bench.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module


def test_peer_memory_reads_a_process_and_its_children(peer_bench: ModuleType) -> None:
    # As for `vigil serve`: the gateway is the process, its workers are children.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in peer_bench.descendants(os.getpid())
        assert peer_bench.rss_bytes(os.getpid()) > 10e6
        assert peer_bench.rss_bytes(child.pid) > 0
    finally:
        child.kill()
        child.wait()


def _fake_openai_server(with_usage: bool) -> httpx.MockTransport:
    """Streams one chunk per token, as llama-server (no usage) or Vigil (usage) do."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["stream"] and body["ignore_eos"] and len(body["prompt"]) == 132
        n = body["max_tokens"]
        chunks = [{"choices": [{"index": 0, "text": "a", "finish_reason": None}]}] * n
        chunks.append({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        if with_usage:
            usage = {"prompt_tokens": 132, "completion_tokens": n, "total_tokens": 132 + n}
            chunks.append({"choices": [], "usage": usage})
        sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})

    return httpx.MockTransport(handle)


@pytest.mark.parametrize("with_usage", [False, True])
def test_peer_workload_counts_tokens_with_or_without_usage(
    peer_bench: ModuleType, with_usage: bool
) -> None:
    work = peer_bench.Workload(
        concurrencies=[1, 4], requests_per_client=2, output_tokens=5, prefix_requests=2, repeats=2
    )
    transport = _fake_openai_server(with_usage)
    run = peer_bench.run_workload("http://peer", "m", work, transport=transport)
    assert len(run.figures["c=4 tok/s"]) == 2  # one value per repeat
    assert set(run.figures) >= {"c=1 ITL p50 ms", "c=4 TTFT p50 ms", "prefix c=1 TTFT p50 ms"}
    timing = asyncio.run(
        peer_bench.stream_completion(
            httpx.AsyncClient(base_url="http://peer", transport=transport), "m", [1] * 132, 5
        )
    )
    assert timing.num_tokens == 5 and timing.itl_s is not None


def test_peer_table_gives_spread_and_ratio(peer_bench: ModuleType) -> None:
    peer, vigil = peer_bench.ServerRun(), peer_bench.ServerRun()
    for v in (40.0, 42.0, 44.0):
        peer.add("c=1 tok/s", v)
    for v in (20.0, 21.0, 25.0):
        vigil.add("c=1 tok/s", v)
    peer.memory["total"] = 1_400_000_000
    vigil.memory.update(total=2_800_000_000, gateway=400_000_000, worker=2_400_000_000)
    int4 = peer_bench.ServerRun()
    for v in (80.0, 84.0):
        int4.add("c=1 tok/s", v)
    runs = {"llama-server": peer, "vigil": vigil, "vigil --quantization int4": int4}
    table = peer_bench.format_table(runs)
    assert "42.0 (40.0-44.0)" in table and "21.0 (20.0-25.0)" in table
    header, tok_s = table.splitlines()[:2]
    assert header.index("vigil/llama-server") < header.index("int4/llama-server")
    assert tok_s.split()[-2:] == ["0.50x", "1.95x"]  # 21 / 42, 82 / 42
    assert "RSS worker MB" in table and "2400" in table


def test_peer_bench_says_how_to_build_a_missing_llama_server(
    peer_bench: ModuleType, tmp_path: Path
) -> None:
    with pytest.raises(SystemExit, match=r"build_llama_server\.sh"):
        peer_bench.find_llama_server(str(tmp_path / "llama-server"))


def test_precision_bench_times_each_mode_against_float32(smollm2, smollm2_int4) -> None:  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "precision_bench", BENCH.parent / "precision_bench.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    models = {"float32": smollm2, "int4": smollm2_int4}
    row = module.bench_batch(models, batch=2, rounds=2, steps=1)
    assert row[0] == "2" and float(row[1]) > 0 and float(row[2]) > 0  # ms per step each
    assert float(row[3].split()[0]) > 0  # int4 / float32, then the rounds' spread
    line = module.bench_prefill(models, tokens=16, rounds=1)
    assert line.startswith("16-token prefill: float32 ") and ", int4 " in line


def test_api_bench_prints_compile_times_for_the_test_schemas_and_tool_grammars(
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = str(BENCH.parent)
    sys.path.insert(0, folder)  # it imports its neighbour `serve`
    try:
        spec = importlib.util.spec_from_file_location("api_bench", BENCH.parent / "api_bench.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    module.compile_times(2)
    out = capsys.readouterr().out
    for name in ("user record", "person (pydantic)", "named tool", "required, 2 tools"):
        assert name in out
