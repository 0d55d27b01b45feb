"""What a model version must be before it is registered: params Vigil knows, an
artifact whose format can be told, and a checksum that matches the artifact's bytes.
These read the artifact (a file, a folder, a bundled package), never the database."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vigil.engine.artifacts import (
    BUNDLED_PREFIX,
    ArtifactError,
    artifact_checksum,
    resolve_artifact,
)
from vigil.engine.bundled import ModelFormat, bundled_source
from vigil.engine.model.config import QUANTIZATIONS
from vigil.platform.control.specs import VersionRef
from vigil.platform.errors import InvalidRequest

DTYPES = ("auto", "float32", "bfloat16", "float16")
TOOL_PARSERS = ("hermes", "llama3_json")  # gateway/tool_formats.py's ToolFormat
MAX_STOP_STRINGS = 16  # as many as a request's `stop` may hold


def check_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A version's params: dtype, quantization, the sampling defaults a request may
    override (temperature, top_p, top_k, max_tokens, stop), and how its tool calls are
    written (gateway/tool_formats.py)."""
    checked: dict[str, Any] = {}
    for name, value in params.items():
        if (
            (name == "dtype" and value in DTYPES)
            or (name == "quantization" and value in QUANTIZATIONS)
            or (name == "tool_parser" and value in TOOL_PARSERS)
        ):
            checked[name] = value
        elif (name == "temperature" and _number(value) and 0 <= value <= 2) or (
            name == "top_p" and _number(value) and 0 < value <= 1
        ):
            checked[name] = float(value)
        elif name == "max_tokens" and isinstance(value, int) and not isinstance(value, bool):
            if value < 1:
                raise _bad_param(name, value)
            checked[name] = value  # the output cap of a request that sets none
        elif name == "stop" and _stop_strings(value):
            checked[name] = list(value)  # a request that sets no stop ends at these
        elif name == "top_k" and isinstance(value, int) and not isinstance(value, bool):
            if value < -1:
                raise _bad_param(name, value)
            checked[name] = value
        else:
            raise _bad_param(name, value)
    return checked


def _stop_strings(value: Any) -> bool:
    return (
        isinstance(value, list)
        and 1 <= len(value) <= MAX_STOP_STRINGS
        and all(isinstance(v, str) and v for v in value)
    )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bad_param(name: str, value: Any) -> InvalidRequest:
    allowed = (
        f"dtype ({', '.join(DTYPES)}), quantization ({', '.join(QUANTIZATIONS)}), "
        "temperature (0 to 2), top_p (above 0, at most 1), "
        "top_k (an integer, -1 or 0 for none), max_tokens (at least 1: the cap of a "
        f"request that sets none), stop (a list of 1 to {MAX_STOP_STRINGS} non-empty "
        f"strings), tool_parser ({', '.join(TOOL_PARSERS)})"
    )
    return InvalidRequest(
        f"params.{name} = {value!r} is not allowed; a version's params are {allowed}",
        param=f"params.{name}",
        code="invalid_value",
    )


def check_artifact_place(artifact: str, model_dirs: Sequence[Path]) -> None:
    """A version's weights come from a bundled package or from inside the configured model
    directories, after symlinks and '..' are resolved: registering '/etc/shadow' must not
    hand out its checksum. Anything else gets the same answer whether it exists or not."""
    if artifact.startswith(BUNDLED_PREFIX):
        return
    try:
        resolved: Path | None = Path(artifact).resolve()
    except (ValueError, OSError):  # a NUL byte or a lone surrogate names no file
        resolved = None
    if resolved is None or not any(resolved.is_relative_to(d.resolve()) for d in model_dirs):
        where = ", ".join(str(d) for d in model_dirs) or "none are configured"
        raise InvalidRequest(
            f"The artifact must be 'bundled:<name>' or a file or folder inside the model "
            f"directories ({where}; `vigil serve --model-dir`); {artifact!r} is not usable.",
            param="artifact",
            code="artifact_not_allowed",
        )


def infer_format(artifact: str) -> ModelFormat:
    if artifact.startswith(BUNDLED_PREFIX):
        try:
            return bundled_source(artifact.removeprefix(BUNDLED_PREFIX)).format
        except (KeyError, FileNotFoundError) as exc:
            raise InvalidRequest(str(exc), param="artifact", code="invalid_artifact") from exc
    if artifact.endswith(".gguf"):
        return ModelFormat.GGUF
    if Path(artifact).is_dir():
        return ModelFormat.HF
    raise InvalidRequest(
        f"cannot tell the format of {artifact!r}: give 'bundled:<name>', a .gguf file or a "
        "Hugging Face folder, or say the format ('gguf' or 'hf')",
        param="format",
        code="invalid_value",
    )


async def verified_checksum(ref: VersionRef) -> str:
    """The artifact's SHA-256; the one given must match it."""
    try:
        source = resolve_artifact(ref.model, ref.version, ref.artifact, ref.kind, ref.format)
    except ArtifactError as exc:
        raise InvalidRequest(
            f"{ref.key}: {exc}", param="artifact", code="invalid_artifact"
        ) from exc
    actual = await asyncio.to_thread(artifact_checksum, source.path)
    if ref.checksum is not None and ref.checksum.lower() != actual:
        raise InvalidRequest(
            f"{ref.key}: the checksum given ({ref.checksum}) does not match the artifact "
            f"{ref.artifact} (SHA-256 {actual}); check that it is the file you meant, or "
            "leave the checksum out to record the artifact as it is",
            param="checksum",
            code="checksum_mismatch",
        )
    return actual
