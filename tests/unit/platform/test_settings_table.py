"""The table of settings (platform/settings/table.py): every setting reaches the record
field it feeds through its flag and through its variable, every flag is read by
something, every record field is read by something, and --help names every variable."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from operator import attrgetter
from pathlib import Path
from typing import Any

import pytest

from vigil.platform.cli import build_parser, main
from vigil.platform.settings import (
    EdgeSettings,
    EngineSettings,
    ServeSettings,
    SettingsError,
    TraceSettings,
    WorkerSettings,
    database_url,
    plan_gateway,
    serve_settings,
    sqlite_url,
    worker_settings,
)
from vigil.platform.settings.table import SETTINGS, Command, Setting, default_of, settings_of

ROOT = Path(__file__).resolve().parents[3]

# A value unlike the default for each setting, by (variable, field): its text, and what the
# field it feeds must then hold. A setting added to the table without one fails below.
EXAMPLES: dict[tuple[str, str], tuple[str, Any]] = {
    ("VIGIL_HOST", "host"): ("127.0.0.2", "127.0.0.2"),
    ("VIGIL_PORT", "port"): ("9123", 9123),
    ("VIGIL_MODELS", "models"): ("smollm2-135m-instruct", ("smollm2-135m-instruct",)),
    ("VIGIL_CONFIG", "config_path"): ("deploy.toml", Path("deploy.toml")),
    ("VIGIL_AUTH", "auth"): ("keys", "keys"),
    ("VIGIL_WORKERS", "workers"): ("3", 3),
    ("VIGIL_ROUTING", "routing"): ("round_robin", "round_robin"),
    ("VIGIL_EXTERNAL_URL", "external_url"): (
        "https://vigil.example.com/",
        "https://vigil.example.com",
    ),
    ("VIGIL_WORKER_TOKEN", "worker_token"): ("s3cret", "s3cret"),
    ("VIGIL_DATA_DIR", "data_dir"): ("/srv/vigil", Path("/srv/vigil")),
    ("VIGIL_DATABASE_URL", "database_url"): (
        "postgresql+asyncpg://db/v",
        "postgresql+asyncpg://db/v",
    ),
    ("VIGIL_MODEL_DIRS", "model_dirs"): ("/srv/models", (Path("/srv/models"),)),
    ("VIGIL_REDIS_URL", "redis_url"): ("redis://cache:6379", "redis://cache:6379"),
    ("VIGIL_MAX_REQUEST_BYTES", "max_request_bytes"): ("1MiB", 1 << 20),
    ("VIGIL_MAX_PROMPT_CHARS", "max_prompt_chars"): ("5000", 5000),
    ("VIGIL_MAX_CHOICES", "max_choices"): ("3", 3),
    ("VIGIL_MAX_QUEUE_WAIT", "max_queue_wait_s"): ("7.5", 7.5),
    ("VIGIL_SSE_KEEPALIVE", "sse_keepalive_s"): ("2.5", 2.5),
    ("VIGIL_MAX_HEADER_BYTES", "edge.max_header_bytes"): ("16KiB", 16 << 10),
    ("VIGIL_MAX_HEADER_COUNT", "edge.max_header_count"): ("50", 50),
    ("VIGIL_HEADER_TIMEOUT", "edge.header_timeout_s"): ("2.5", 2.5),
    ("VIGIL_BODY_TIMEOUT", "edge.body_timeout_s"): ("30", 30.0),
    ("VIGIL_KEEPALIVE_TIMEOUT", "edge.keepalive_timeout_s"): ("1.5", 1.5),
    ("VIGIL_MAX_CONNECTIONS", "edge.max_connections"): ("8", 8),
    ("VIGIL_FORWARDED_ALLOW_IPS", "edge.forwarded_allow_ips"): ("10.0.0.5", ("10.0.0.5",)),
    ("VIGIL_DEVICE", "engine.device"): ("cpu", "cpu"),
    ("VIGIL_DTYPE", "engine.dtype"): ("bfloat16", "bfloat16"),
    ("VIGIL_QUANTIZATION", "engine.quantization"): ("int4", "int4"),
    ("VIGIL_TORCH_THREADS", "engine.torch_threads"): ("3", 3),
    ("VIGIL_BLOCK_SIZE", "engine.block_size"): ("32", 32),
    ("VIGIL_KV_CACHE_MEMORY", "engine.kv_cache_memory"): ("1GiB", 1 << 30),
    ("VIGIL_MAX_NUM_SEQS", "engine.max_num_seqs"): ("7", 7),
    ("VIGIL_MAX_NUM_BATCHED_TOKENS", "engine.max_num_batched_tokens"): ("4096", 4096),
    ("VIGIL_MAX_MODEL_LEN", "engine.max_model_len"): ("512", 512),
    ("VIGIL_NO_PREFIX_CACHE", "engine.enable_prefix_caching"): ("1", False),
    ("VIGIL_BATCH_AGING", "engine.batch_aging_s"): ("3.5", 3.5),
    ("VIGIL_EMBED_MAX_BATCH_SIZE", "engine.embed_max_batch_size"): ("8", 8),
    ("VIGIL_EMBED_MAX_WAIT_MS", "engine.embed_max_wait_ms"): ("2.5", 2.5),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "tracing.otlp_endpoint"): (
        "http://otel:4318",
        "http://otel:4318",
    ),
    ("OTEL_TRACES_SAMPLER_ARG", "tracing.sample_ratio"): ("0.25", 0.25),
    ("VIGIL_TRACE_BUFFER", "tracing.buffer"): ("64", 64),
    ("VIGIL_TRACE_PARENT_FROM", "tracing.parent_from"): ("10.0.0.0/8", ("10.0.0.0/8",)),
    ("VIGIL_WEBHOOK_MAX_AGE", "webhook_max_age_s"): ("3600", 3600.0),
    ("VIGIL_WEBHOOK_TIMEOUT", "webhook_timeout_s"): ("2.5", 2.5),
    ("VIGIL_WEBHOOK_ALLOW", "webhook_allow"): ("alertmanager.svc", ("alertmanager.svc",)),
    ("VIGIL_CONSOLE_SESSION", "console_session_s"): ("120", 120),
    ("VIGIL_CONSOLE_SECRET", "console_secret"): ("shh", "shh"),
    ("VIGIL_LOG_LEVEL", "log_level"): ("debug", "debug"),
    ("VIGIL_LOG_FORMAT", "log_format"): ("json", "json"),
    ("VIGIL_DRAIN_DELAY", "drain_delay_s"): ("1.5", 1.5),
    ("VIGIL_DRAIN_TIMEOUT", "drain_timeout_s"): ("12", 12.0),
    ("VIGIL_GATEWAY", "gateway_urls"): ("http://gw:8000", ("http://gw:8000",)),
    ("VIGIL_RESOLVE_GATEWAYS", "resolve_gateways"): ("1", True),
    ("VIGIL_WORKER_HOST", "host"): ("0.0.0.0", "0.0.0.0"),
    ("VIGIL_WORKER_PORT", "port"): ("9001", 9001),
    ("VIGIL_ADVERTISE_HOST", "advertise_host"): ("10.0.0.7", "10.0.0.7"),
    ("VIGIL_WORKER_ID", "worker_id"): ("gpu-1", "gpu-1"),
    ("VIGIL_GATEWAY", "gateway"): ("http://gw:8000/", "http://gw:8000"),
}

# What each command needs besides the setting under test, so that it composes at all.
WORKER_NEEDS = {"VIGIL_WORKER_TOKEN": "t", "VIGIL_GATEWAY": "http://base:1"}
PLAN_ARGS = ["--deployment", "d", "--rps", "1", "--prompt-tokens", "1", "--output-tokens", "1"]
ARGV = {
    Command.SERVE: ["serve"],
    Command.WORKER: ["worker"],
    Command.MIGRATE: ["migrate"],
    Command.KEYS: ["keys", "list"],
    Command.ADMIN: ["admin", "create", "--username", "u"],
    Command.PLAN: ["plan", *PLAN_ARGS, "--user", "u"],
}


def composed(command: Command, setting: Setting, flags: dict[str, Any], env: dict[str, str]) -> Any:
    """What the command makes of these flags and variables, where the setting lands."""
    if command is Command.SERVE:
        return attrgetter(setting.field)(serve_settings(flags, env))
    if command is Command.WORKER:
        return attrgetter(setting.field)(worker_settings(flags, {**WORKER_NEEDS, **env}))
    if command is Command.PLAN:
        return plan_gateway(flags, env)
    url = database_url(flags, env)
    return (
        url
        if setting.field == "database_url"
        else Path(url.removeprefix("sqlite+aiosqlite:///")).parent
    )


def expected_of(setting: Setting, value: Any) -> Any:
    if setting.field == "data_dir":  # seen through the database URL by the database commands
        return Path(sqlite_url(value).removeprefix("sqlite+aiosqlite:///")).parent
    return value


def flags_of(command: Command, argv: list[str]) -> dict[str, Any]:
    return vars(build_parser().parse_args([*ARGV[command], *argv]))


CASES = [(c, s) for c in Command for s in settings_of(c)]


def test_every_setting_has_an_example_and_each_command_names_each_setting_once() -> None:
    assert set(EXAMPLES) == {(s.variable, s.field) for s in SETTINGS}
    for command in Command:
        ours = settings_of(command)
        assert len({s.name for s in ours}) == len(ours), command
        assert len({s.variable for s in ours}) == len(ours), command
        assert len({s.field for s in ours}) == len(ours), command


@pytest.mark.parametrize(("command", "setting"), CASES, ids=[f"{c}-{s.name}" for c, s in CASES])
def test_each_setting_reaches_its_field_by_flag_and_by_variable(
    command: Command, setting: Setting
) -> None:
    text, value = EXAMPLES[(setting.variable, setting.field)]
    expected = (
        expected_of(setting, value) if command not in (Command.SERVE, Command.WORKER) else value
    )
    default = (
        composed(command, setting, flags_of(command, []), {})
        if setting.field != "gateway"
        else None
    )
    assert expected != default, "the example must differ from the default, or it proves nothing"
    by_variable = composed(command, setting, flags_of(command, []), {setting.variable: text})
    assert by_variable == expected
    if setting.flag:
        argv = [f"--{setting.name}"] if setting.switch else [f"--{setting.name}", text]
        assert composed(command, setting, flags_of(command, argv), {}) == expected
        # And the flag beats the variable.
        other = {setting.variable: "not-a-value-of-any-setting:x"}
        assert composed(command, setting, flags_of(command, argv), other) == expected


def _parsers(command: Command) -> list[argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    parser: argparse.ArgumentParser = sub.choices[command.value]  # type: ignore[index]
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(nested[0].choices.values()) if nested else [parser]


@pytest.mark.parametrize("command", list(Command))
def test_every_flag_is_a_setting_or_read_by_its_command(command: Command) -> None:
    """No flag is parsed into nothing: a setting's is composed into a record (the test
    above), any other is read by its command's module as `args.<dest>`."""
    ours = {s.dest for s in settings_of(command) if s.flag}
    source = (ROOT / "platform" / "cli" / f"{command.value}.py").read_text()
    for parser in _parsers(command):
        dests = {a.dest for a in parser._actions if a.dest != "help"}
        assert ours <= dests, f"{command}: settings without a flag: {ours - dests}"
        for dest in dests - ours:
            assert f"args.{dest}" in source, f"vigil {command} --{dest} is read by nothing"


RECORDS = (ServeSettings, EngineSettings, TraceSettings, EdgeSettings, WorkerSettings)
SETTINGS_CODE = {"__init__.py", "table.py", "compose.py", "values.py"}


@pytest.mark.parametrize("record", RECORDS, ids=[r.__name__ for r in RECORDS])
def test_every_record_field_is_read_beyond_the_settings_code(record: type) -> None:
    """A field composed and passed down but read by nothing is a setting that does
    nothing; the records' own properties count as readers."""
    sources = [
        p.read_text()
        for folder in ("platform", "web")
        for p in (ROOT / folder).rglob("*.py")
        if not (p.parent.name == "settings" and p.name in SETTINGS_CODE)
    ]
    for field in fields(record):
        pattern = re.compile(rf"\.{field.name}\b")
        assert any(pattern.search(s) for s in sources), f"{record.__name__}.{field.name}"


@pytest.mark.parametrize("argv", [v for v in ARGV.values()], ids=[c.value for c in ARGV])
def test_help_names_every_variable_of_the_command(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    command = Command(argv[0])
    with pytest.raises(SystemExit) as exited:
        main([*argv[: 2 if command in (Command.KEYS, Command.ADMIN) else 1], "--help"])
    assert exited.value.code == 0
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    for setting in settings_of(command):
        assert setting.variable in out, f"vigil {command} --help does not name {setting.variable}"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("vigil.example.com", "must be a URL starting with http:// or https://"),
        ("ftp://vigil.example.com", "must be a URL starting with http:// or https://"),
        ("https://", "must name a host"),
        ("https://vigil.example.com/?a=1", "must have no query or fragment"),
        ("https://vigil.example.com/#top", "must have no query or fragment"),
    ],
)
def test_external_url_is_an_absolute_http_url_without_a_query(text: str, problem: str) -> None:
    assert serve_settings({}, {}).external_url == ""
    path = serve_settings({"external_url": "https://ops.example.com/vigil/"}, {})
    assert path.external_url == "https://ops.example.com/vigil"  # a path prefix is kept
    with pytest.raises(SettingsError, match=rf"--external-url \(VIGIL_EXTERNAL_URL\): {problem}"):
        serve_settings({"external_url": text}, {})


README = ROOT / "README.md"
BEGIN = "<!-- the settings table: tests/unit/platform/test_settings_table.py writes it -->"
END = "<!-- end of the settings table -->"


def readme_table() -> str:
    rows = [
        "| flag | variable | commands | default | what it does |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in SETTINGS:
        lists = f"; repeatable, or `{s.many}`-separated" if s.many else ""
        rows.append(
            f"| {f'`--{s.name}`' if s.flag else '-'} | `{s.variable}` "
            f"| {', '.join(c.value for c in Command if c in s.commands)} "
            f"| {default_of(s) or 'off'} | {s.help}{lists} |"
        )
    return "\n".join([BEGIN, *rows, END])


def test_the_readme_lists_every_setting_as_the_table_declares_it() -> None:
    text = README.read_text()
    assert BEGIN in text and END in text, f"README.md has no settings table between {BEGIN}"
    found = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert found == readme_table(), "README.md's settings table is stale; it should read:\n" + (
        readme_table()
    )
