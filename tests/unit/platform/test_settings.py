"""Settings come from flags, then VIGIL_* variables, then defaults, checked once."""

from __future__ import annotations

from pathlib import Path

import pytest

from vigil.platform.settings import SettingsError, parse_bytes, serve_settings


def test_defaults_serve_both_bundled_models_on_localhost() -> None:
    s = serve_settings({}, env={})
    assert (s.host, s.port) == ("127.0.0.1", 8000)
    assert s.models == ("smollm2-135m-instruct", "all-minilm-l6-v2")
    assert s.resolved_database_url.startswith("sqlite+aiosqlite:///")
    assert s.resolved_database_url.endswith("/.vigil/vigil.db")
    assert (s.workers, s.routing) == (1, "p2c")
    assert serve_settings({}, env={"VIGIL_ROUTING": "round_robin"}).routing == "round_robin"


def test_flag_beats_environment_beats_default() -> None:
    env = {"VIGIL_PORT": "9000", "VIGIL_HOST": "0.0.0.0", "VIGIL_MAX_NUM_SEQS": "8"}
    s = serve_settings({"port": 9100, "host": None}, env=env)
    assert s.port == 9100
    assert s.host == "0.0.0.0"
    assert s.engine.max_num_seqs == 8


def test_data_dir_sets_the_sqlite_path(tmp_path: Path) -> None:
    s = serve_settings({"data_dir": str(tmp_path)}, env={})
    assert s.resolved_database_url == f"sqlite+aiosqlite:///{tmp_path.resolve()}/vigil.db"


def test_database_url_overrides_sqlite() -> None:
    url = "postgresql+asyncpg://vigil@db/vigil"
    assert serve_settings({}, env={"VIGIL_DATABASE_URL": url}).resolved_database_url == url


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1024", 1024),
        ("512MiB", 512 * 1024**2),
        ("2GB", 2 * 1000**3),
        ("1.5 GiB", 1610612736),
        ("64k", 64_000),
    ],
)
def test_parse_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    ("flags", "mentions"),
    [
        ({"port": "eighty"}, r"--port \(VIGIL_PORT\): must be a whole number, got 'eighty'"),
        ({"max_num_seqs": "0"}, r"--max-num-seqs \(VIGIL_MAX_NUM_SEQS\): must be at least 1"),
        ({"kv_cache_memory": "lots"}, "--kv-cache-memory .*size in bytes"),
        ({"routing": "random"}, "--routing .*must be one of p2c, round_robin; got 'random'"),
        ({"quantization": "int3"}, "--quantization .*must be one of none, int4, int8, auto; got"),
        ({"device": "tpu"}, "--device .*must be auto, cpu, cuda or cuda:N, got 'tpu'"),
    ],
)
def test_bad_values_name_the_setting(flags: dict[str, object], mentions: str) -> None:
    with pytest.raises(SettingsError, match=mentions):
        serve_settings(flags, env={})


def test_token_budget_below_batch_size_is_refused() -> None:
    with pytest.raises(SettingsError, match="max_num_batched_tokens"):
        serve_settings({"max_num_seqs": 64, "max_num_batched_tokens": 32}, env={})


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2GiB", 2 * 1024**3), ("0.5", 0.5), ("25%", 0.25), (".9", 0.9)],
)
def test_kv_cache_memory_is_bytes_or_a_fraction(text: str, expected: float) -> None:
    memory = serve_settings({"kv_cache_memory": text}, env={}).engine.kv_cache_memory
    assert memory == expected
    assert isinstance(memory, int) == (expected >= 1)  # an int is bytes, a float a fraction


def test_kv_cache_fraction_outside_zero_one_is_refused() -> None:
    with pytest.raises(SettingsError, match="between 0 and 1"):
        serve_settings({"kv_cache_memory": "150%"}, env={})


def test_kv_cache_budget_resolves_a_fraction_of_free_memory() -> None:
    import torch

    from vigil.engine.device import free_memory_bytes
    from vigil.platform.worker.runtime import DEFAULT_CPU_KV_BYTES, kv_cache_budget

    cpu = torch.device("cpu")
    assert kv_cache_budget(serve_settings({}, env={}).engine, cpu) == DEFAULT_CPU_KV_BYTES
    half = kv_cache_budget(serve_settings({"kv_cache_memory": "0.5"}, env={}).engine, cpu)
    assert 0.4 * free_memory_bytes(cpu) < half < 0.6 * free_memory_bytes(cpu)


def test_a_local_worker_is_handed_the_gateways_settings_whole() -> None:
    from vigil.platform.settings import local_worker_settings
    from vigil.platform.worker.handoff import decode, encode

    flags = {
        "host": "0.0.0.0",
        "auth": "keys",
        "port": 9100,
        "kv_cache_memory": "0.25",
        "max_num_seqs": 7,
        "torch_threads": 1,
        "no_prefix_cache": True,
        "max_model_len": 512,
        "batch_aging": 3.5,
        "quantization": "int4",
        "log_format": "json",
        "drain_timeout": 12,
        "otlp_endpoint": "http://collector:4318",
    }
    serve = serve_settings(flags, env={})
    local = local_worker_settings(serve, "the-token", cpus=8)
    assert decode(encode(local)) == local  # one JSON value, read back as the same record
    assert local.engine == serve.engine and local.tracing == serve.tracing
    assert local.gateway_urls == ("http://127.0.0.1:9100",)  # a wildcard host: loopback
    assert (local.worker_token, local.log_format, local.drain_timeout_s) == (
        "the-token",
        "json",
        12,
    )
    assert local.exit_with_parent
    # Several local workers share the cores when no thread count is given.
    shared = local_worker_settings(serve_settings({"workers": 2}, env={}), "t", cpus=8)
    assert shared.engine.torch_threads == 4


def test_a_worker_needs_a_gateway_and_a_token() -> None:
    from vigil.platform.settings import worker_settings

    with pytest.raises(SettingsError, match="--gateway"):
        worker_settings({}, env={"VIGIL_WORKER_TOKEN": "t"})
    with pytest.raises(SettingsError, match="VIGIL_WORKER_TOKEN"):
        worker_settings({"gateway": "http://x"}, env={})


def test_request_bounds_and_shared_state_come_from_flags_or_variables() -> None:
    s = serve_settings({"max_request_bytes": "1MiB"}, {"VIGIL_MAX_PROMPT_CHARS": "5000"})
    assert (s.max_request_bytes, s.max_prompt_chars) == (1 << 20, 5000)
    assert s.throttle_storage_uri == "async+memory://"
    shared = serve_settings({}, {"VIGIL_REDIS_URL": "redis://127.0.0.1:6379"})
    assert shared.throttle_storage_uri == "async+redis://127.0.0.1:6379"
    with pytest.raises(SettingsError, match="redis://"):
        serve_settings({"redis_url": "http://127.0.0.1:6379"}, {})


def test_model_directories_from_repeated_flags_or_one_variable(tmp_path: Path) -> None:
    assert serve_settings({"data_dir": str(tmp_path)}, {}).resolved_model_dirs == (
        tmp_path / "models",
    )
    flags = serve_settings({"model_dir": ["/srv/a", "/srv/b"]}, {"VIGIL_MODEL_DIRS": "/x"})
    assert flags.resolved_model_dirs == (Path("/srv/a"), Path("/srv/b"))
    env = serve_settings({}, {"VIGIL_MODEL_DIRS": "/srv/a:/srv/c"})
    assert env.resolved_model_dirs == (Path("/srv/a"), Path("/srv/c"))


def test_unset_torch_threads_leave_a_core_for_small_steps_only() -> None:
    from vigil.engine.threads import StepThreads
    from vigil.platform.worker.runtime import step_threads

    default = serve_settings({}, env={}).engine
    assert step_threads(default, cpus=2) == StepThreads(small=1, large=2)
    assert step_threads(default, cpus=1) == StepThreads(small=1, large=1)
    fixed = serve_settings({"torch_threads": 3}, env={}).engine
    assert step_threads(fixed, cpus=16) == StepThreads(small=3, large=3)


def test_local_workers_share_the_cores_unless_threads_are_given() -> None:
    from vigil.platform.settings import local_worker_engine

    default = serve_settings({}, env={}).engine
    assert local_worker_engine(default, workers=1, cpus=8) == default
    assert local_worker_engine(default, workers=2, cpus=8).torch_threads == 4
    assert local_worker_engine(default, workers=3, cpus=2).torch_threads == 1
    fixed = serve_settings({"torch_threads": 6}, env={}).engine
    assert local_worker_engine(fixed, workers=2, cpus=8) == fixed


def test_trusted_trace_parents_come_from_flags_or_a_comma_separated_variable() -> None:
    assert serve_settings({}, env={}).tracing.parent_from == ()  # nobody's is joined
    flags = {"trace_parent_from": ["10.0.0.7", "192.168.0.0/16,fd00::/8"]}
    assert serve_settings(flags, env={}).tracing.parent_from == (
        "10.0.0.7/32",
        "192.168.0.0/16",
        "fd00::/8",
    )
    env = {"VIGIL_TRACE_PARENT_FROM": "10.1.0.0/16, 127.0.0.1"}
    assert serve_settings({}, env=env).tracing.parent_from == ("10.1.0.0/16", "127.0.0.1/32")
    with pytest.raises(SettingsError, match=r"--trace-parent-from .*must be an IP address or CIDR"):
        serve_settings({"trace_parent_from": ["mesh.internal"]}, env={})


def test_connection_bounds_and_trusted_proxies_come_from_flags_or_variables() -> None:
    d = serve_settings({}, {}).edge
    assert (d.max_header_bytes, d.max_header_count, d.max_connections) == (64 << 10, 100, 1000)
    assert (d.header_timeout_s, d.body_timeout_s, d.keepalive_timeout_s) == (10.0, 60.0, 5.0)
    assert d.forwarded_allow_ips == ()  # forwarded headers are believed from no one
    s = serve_settings(
        {"max_header_bytes": "16KiB", "header_timeout": 2.5, "max_connections": 8},
        {"VIGIL_FORWARDED_ALLOW_IPS": "10.0.0.5, 10.1.0.0/16", "VIGIL_BODY_TIMEOUT": "30"},
    ).edge
    assert (s.max_header_bytes, s.header_timeout_s, s.max_connections) == (16 << 10, 2.5, 8)
    assert s.body_timeout_s == 30.0
    assert s.forwarded_allow_ips == ("10.0.0.5", "10.1.0.0/16")
    with pytest.raises(SettingsError, match=r"--max-header-bytes .*must be at least 4096 bytes"):
        serve_settings({"max_header_bytes": "100"}, {})
    with pytest.raises(SettingsError, match=r"--header-timeout .*must be positive"):
        serve_settings({"header_timeout": "0"}, {})
