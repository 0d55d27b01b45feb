"""The deployments file (`vigil serve --config vigil.toml`): versions and deployments
declared as TOML, checked with errors that name the entry to fix.

    [[models]]                       # optional: a model served from a path, as
    name = "mine"                    # `vigil serve mine=PATH` would (versions/local.py)
    artifact = "/srv/models/mine.gguf"   # a .gguf file or a Hugging Face folder

    [[versions]]                     # optional: more versions of a model declared
    model = "smollm2-135m-instruct"  # (bundled, named on the command line, or above)
    version = "warm"
    artifact = "bundled:smollm2-135m-instruct"   # or a .gguf file / an HF folder
    format = "gguf"
    params = { temperature = 0.7 }

    [[deployments]]
    name = "chat"
    model = "smollm2-135m-instruct"
    version = "warm"                 # default: the bundled version
    canary = { version = "...", weight = 10 }
    shadow = { version = "...", weight = 20 }   # mirrored requests, answers discarded
    ...
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.engine.request import Priority
from vigil.platform.control.specs import (
    ClassLimits,
    DeploymentSpec,
    FallbackSpec,
    FallbackTrigger,
    LongPromptPool,
    SLOTargets,
    VersionRef,
    bundled_version,
    default_limits,
    version_params,
)
from vigil.platform.control.versions.checks import check_params
from vigil.platform.control.versions.local import local_version, model_args
from vigil.platform.errors import InvalidRequest

E = TypeVar("E", bound=Enum)


class ConfigError(ValueError):
    """The deployments file says something Vigil cannot use; the message says where."""


def load_declarations(
    path: Path,
    bundled_models: set[str],
    limits: Mapping[Priority, ClassLimits] | None = None,
    local: Sequence[VersionRef] = (),
) -> tuple[list[DeploymentSpec], list[VersionRef]]:
    """The file's deployments, and the versions its [[models]] and [[versions]] declare
    (registered whether or not a deployment serves them yet). `limits`: what a
    deployment's classes get for what its entry leaves out (none: `default_limits()`).
    `local`: the versions of the models `vigil serve` was given by path, which the file
    may name too. A `[[models]]` entry's artifact is read whole (its checksum names its
    version): call it off the event loop."""
    limits = default_limits() if limits is None else limits
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    entries = raw.get("deployments")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected one or more [[deployments]] tables")
    models = raw.get("models", [])
    own = [_model(entry, path, f"{path}: models[{i}]") for i, entry in enumerate(models)]
    declared = [*map(bundled_version, sorted(bundled_models)), *local, *own]
    known = {v.model for v in declared}
    if len(known) < len(declared):
        model = next(m for m in known if sum(v.model == m for v in declared) > 1)
        raise ConfigError(
            f"{path}: model {model!r} is declared twice (bundled, given to `vigil serve`, or "
            "in [[models]]): give the other one another name"
        )
    versions = {(v.model, v.version): v for v in declared}
    for i, entry in enumerate(raw.get("versions", [])):
        v = _version(entry, f"{path}: versions[{i}]")
        if v.model not in known:
            raise ConfigError(
                f"{path}: versions[{i}]: unknown model {v.model!r} (known: "
                f"{', '.join(sorted(known)) or 'none'}; declare one with [[models]])"
            )
        versions[(v.model, v.version)] = v
        own.append(v)
    specs = [
        _spec(entry, versions, limits, f"{path}: deployments[{i}]")
        for i, entry in enumerate(entries)
    ]
    _check_references(specs, path)
    return specs, own


def _check_references(specs: list[DeploymentSpec], path: Path) -> None:
    names = [s.name for s in specs]
    for spec in specs:
        if names.count(spec.name) > 1:
            raise ConfigError(f"{path}: deployment {spec.name!r} is defined twice")
        if spec.fallback and spec.fallback.deployment not in names:
            raise ConfigError(
                f"{path}: deployment {spec.name!r} falls back to "
                f"{spec.fallback.deployment!r}, which is not defined"
            )
        if spec.fallback and spec.fallback.deployment == spec.name:
            raise ConfigError(f"{path}: deployment {spec.name!r} cannot fall back to itself")


def _model(entry: dict[str, Any], path: Path, where: str) -> VersionRef:
    """`[[models]]`: name and artifact (relative to the file's folder); its version is
    the one `vigil serve NAME=PATH` registers."""
    if not isinstance(entry, dict) or set(entry) != {"name", "artifact"}:
        raise ConfigError(f"{where}: a [[models]] entry takes name and artifact, and only them")
    artifact = path.parent / Path(str(entry["artifact"])).expanduser()
    try:
        (arg,) = model_args([f"{entry['name']}={artifact}"])
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    return local_version(arg)


def _version(entry: dict[str, Any], where: str) -> VersionRef:
    try:
        params = check_params(dict(entry.get("params", {})))
    except InvalidRequest as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    try:
        return VersionRef(
            model=str(entry["model"]),
            version=str(entry["version"]),
            kind=_choice(ModelKind, entry.get("kind", "generate"), "kind", where),
            format=_choice(ModelFormat, entry.get("format", "gguf"), "format", where),
            artifact=str(entry["artifact"]),
            checksum=entry.get("checksum"),
            params=version_params(params),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc!r}") from exc


def _choice(kind: type[E], value: object, field: str, where: str) -> E:
    """An enum field's value, or an error that lists the valid ones."""
    try:
        return kind(value)
    except ValueError:
        valid = ", ".join(str(member.value) for member in kind)
        raise ConfigError(f"{where}: {field} = {value!r} is not one of {valid}") from None


def _lookup(
    versions: dict[tuple[str, str], VersionRef], model: str, version: str | None, where: str
) -> VersionRef:
    if version is None:
        found = [v for (m, _), v in versions.items() if m == model]
        if not found:
            raise ConfigError(
                f"{where}: unknown model {model!r} (known: "
                f"{', '.join(sorted({m for m, _ in versions}))})"
            )
        return found[0]  # the bundled version comes first
    if (model, version) not in versions:
        raise ConfigError(f"{where}: model {model!r} has no version {version!r}")
    return versions[(model, version)]


def _weighted(
    entry: dict[str, Any],
    role: str,
    versions: dict[tuple[str, str], VersionRef],
    model: str,
    where: str,
) -> tuple[VersionRef | None, int]:
    """`canary = { version, weight }` or `shadow = { ... }`: the version and its share."""
    if role not in entry:
        return None, 0
    version = _lookup(versions, model, str(entry[role]["version"]), where)
    weight = int(entry[role].get("weight", 0))
    if not 0 <= weight <= 100:
        raise ValueError(f"{role} weight {weight} is not between 0 and 100")
    return version, weight


def _spec(
    entry: dict[str, Any],
    versions: dict[tuple[str, str], VersionRef],
    defaults: Mapping[Priority, ClassLimits],
    where: str,
) -> DeploymentSpec:
    try:
        model = str(entry.get("model", entry["name"]))
        stable = _lookup(versions, model, entry.get("version"), where)
        canary, weight = _weighted(entry, "canary", versions, model, where)
        shadow, shadow_weight = _weighted(entry, "shadow", versions, model, where)
        limits = dict(defaults)
        for priority in Priority:
            if priority.label in entry:
                section, base = entry[priority.label], limits[priority]
                limits[priority] = ClassLimits(
                    max_queue=int(section.get("max_queue", base.max_queue)),
                    max_queue_wait_s=float(section.get("max_queue_wait_s", base.max_queue_wait_s)),
                )
        fallback = None
        if "fallback" in entry:
            fb = entry["fallback"]
            fallback = FallbackSpec(
                str(fb["deployment"]),
                _choice(FallbackTrigger, fb["trigger"], "fallback.trigger", where),
                float(fb["threshold_s"]),
            )
        pool = LongPromptPool(**entry["long_prompt_pool"]) if "long_prompt_pool" in entry else None
        return DeploymentSpec(
            name=str(entry["name"]),
            stable=stable,
            canary=canary,
            canary_weight=weight,
            shadow=shadow,
            shadow_weight=shadow_weight,
            max_prompt_tokens=entry.get("max_prompt_tokens"),
            max_tokens=entry.get("max_tokens"),
            limits=limits,
            slo=SLOTargets(**entry["slo"]) if "slo" in entry else SLOTargets(),
            fallback=fallback,
            long_prompt_pool=pool,
        )
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc!r}") from exc
