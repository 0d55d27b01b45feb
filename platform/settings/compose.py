"""The records, composed once at start-up from the table's settings: each from its flag,
else its variable, else the record's default; then the rules that span settings.

`flags` maps a flag's dest to what argparse gave (None: not given); tests pass values
of any type, read as their text.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any, TypeVar

from vigil.platform.settings.records import (
    EngineSettings,
    ServeSettings,
    WorkerSettings,
    sqlite_url,
)
from vigil.platform.settings.table import Command, Setting, settings_of


class SettingsError(ValueError):
    """A setting has a value Vigil cannot use; the message names it."""


def _given(command: Command, flags: Mapping[str, object], env: Mapping[str, str]) -> dict[str, Any]:
    """The value of each of the command's settings that its flag or variable gives, by
    the field it sets; the ones not given are left to the record's default."""
    found: dict[str, Any] = {}
    for setting in settings_of(command):
        texts = _texts(setting, flags.get(setting.dest) if setting.flag else None, env)
        if texts is not None:
            found[setting.field] = _value(setting, texts)
    return found


def _texts(setting: Setting, flag: object, env: Mapping[str, str]) -> list[str] | None:
    """The flag's text (each of a repeated flag's), else the variable's; an empty
    variable counts as not set. A list setting's items are split by its separator."""
    if flag is not None:
        texts = [str(f) for f in flag] if isinstance(flag, list | tuple) else [str(flag)]
    elif env.get(setting.variable):
        texts = [env[setting.variable]]
    else:
        return None
    if setting.many:
        return [item for t in texts for item in t.split(setting.many) if item.strip()]
    return texts


def _value(setting: Setting, texts: list[str]) -> Any:
    try:
        if setting.choices:
            texts = [t.strip().lower() for t in texts]
            for text in texts:
                if text not in setting.choices:
                    raise ValueError(f"must be one of {', '.join(setting.choices)}; got {text!r}")
        if setting.many:
            return tuple(dict.fromkeys(setting.parse(t) for t in texts))  # repeats dropped
        return setting.parse(texts[-1])
    except ValueError as exc:
        raise SettingsError(f"{setting.label}: {exc}") from None


R = TypeVar("R")


def _record(cls: type[R], found: Mapping[str, Any]) -> R:
    """`cls` with the fields found; a nested record (`engine.`) from its own."""
    top: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        prefix = f"{f.name}."
        nested = {k.removeprefix(prefix): v for k, v in found.items() if k.startswith(prefix)}
        if nested:
            factory = f.default_factory
            assert callable(factory), f"{f.name}: a nested record has a default_factory"
            top[f.name] = replace(factory(), **nested)
        elif f.name in found:
            top[f.name] = found[f.name]
    return cls(**top)


def serve_settings(
    flags: Mapping[str, object], env: Mapping[str, str] | None = None
) -> ServeSettings:
    found = _given(Command.SERVE, flags, os.environ if env is None else env)
    settings = _record(ServeSettings, found)
    return replace(
        settings,
        auth=_auth_mode(settings.auth or None, settings.host),
        engine=_checked_engine(settings.engine),
    )


def worker_settings(
    flags: Mapping[str, object], env: Mapping[str, str] | None = None
) -> WorkerSettings:
    """A remote `vigil worker`: its own flags and variables (a local one is handed its
    settings whole: local_worker_settings)."""
    found = _given(Command.WORKER, flags, os.environ if env is None else env)
    if not found.get("gateway_urls"):
        raise SettingsError("a worker needs --gateway URL (or VIGIL_GATEWAY)")
    if not found.get("worker_token"):
        raise SettingsError("a worker needs the gateway's worker token: VIGIL_WORKER_TOKEN")
    found.setdefault("worker_id", f"{socket.gethostname()}-{os.getpid()}")
    settings = _record(WorkerSettings, found)
    return replace(settings, engine=_checked_engine(settings.engine))


def local_worker_settings(settings: ServeSettings, token: str, cpus: int) -> WorkerSettings:
    """What each of `vigil serve`'s own workers runs with (worker_id is set per process):
    the gateway's engine, tracing, logs and drain settings, composed here once and handed
    over whole, so a local worker reads no flags or variables of its own."""
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    return WorkerSettings(
        gateway_urls=(f"http://{host}:{settings.port}",),
        worker_token=token,
        worker_id="local",
        exit_with_parent=True,
        log_level=settings.log_level,
        log_format=settings.log_format,
        engine=local_worker_engine(settings.engine, settings.workers, cpus),
        tracing=settings.tracing,
        drain_timeout_s=settings.drain_timeout_s,
    )


def local_worker_engine(settings: EngineSettings, workers: int, cpus: int) -> EngineSettings:
    """The engine settings of one of `workers` worker processes on this machine: with
    more than one and no --torch-threads, each gets an equal share of the cores for
    every step, so that their prefills never run more threads than there are cores."""
    if workers <= 1 or settings.torch_threads:
        return settings
    return replace(settings, torch_threads=max(1, cpus // workers))


def database_url(flags: Mapping[str, object], env: Mapping[str, str] | None = None) -> str:
    """For the commands that only touch the database (`vigil migrate`, `keys`, `admin`:
    they take the same two settings, --data-dir and --database-url)."""
    found = _given(Command.MIGRATE, flags, os.environ if env is None else env)
    url: str = found.get("database_url", "")
    return url or sqlite_url(found.get("data_dir", ServeSettings().data_dir))


def plan_gateway(flags: Mapping[str, object], env: Mapping[str, str] | None = None) -> str:
    found = _given(Command.PLAN, flags, os.environ if env is None else env)
    if "gateway" not in found:
        raise SettingsError(
            "vigil plan asks a running gateway: give its base URL with --gateway URL or "
            "VIGIL_GATEWAY (e.g. http://127.0.0.1:8000)"
        )
    gateway: str = found["gateway"]
    return gateway


def _checked_engine(engine: EngineSettings) -> EngineSettings:
    if engine.max_num_batched_tokens < engine.max_num_seqs:
        raise SettingsError(
            f"max_num_batched_tokens ({engine.max_num_batched_tokens}) must be at least "
            f"max_num_seqs ({engine.max_num_seqs}): each running sequence needs a token"
        )
    return engine


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _auth_mode(value: str | None, host: str) -> str:
    if value is None:
        return "open" if host in LOOPBACK_HOSTS else "keys"
    if value == "open" and host not in LOOPBACK_HOSTS:
        raise SettingsError(
            f"auth 'open' is only allowed on a loopback host, not {host!r}: anyone who can "
            "reach the port could use it. Create API keys (vigil keys create) instead."
        )
    return value
