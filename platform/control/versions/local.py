"""Models named by where they are: `vigil serve [MODEL ...]` and the deployments file's
`[[models]]`. Each MODEL is a bundled name, a `.gguf` file, a Hugging Face folder, or
`NAME=PATH`; a path's kind and format are read from its own files (engine identify()).

A model served from a path is registered as a version named after its bytes
(`sha256-<first 12 hex digits>`): the same file is the same version at every start,
and a changed file is a new version that its deployment moves to, rather than weights
that a worker refuses for not matching the checksum registered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from vigil.engine.artifacts import artifact_checksum
from vigil.engine.bundled import MINILM, SMOLLM2
from vigil.engine.loaders.identify import ModelFiles, identify
from vigil.platform.control.specs import VersionRef

BUNDLED_NAMES = (SMOLLM2, MINILM)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True, slots=True)
class ModelArg:
    """One MODEL: a bundled model (path None), or a deployment `name` served from `path`,
    whose files say what it is."""

    name: str
    path: Path | None = None
    files: ModelFiles | None = None


def model_args(entries: tuple[str, ...] | list[str]) -> list[ModelArg]:
    """Each entry read and checked (the path's files identified, no weights read), or
    ValueError naming the entry and what is wrong; a name given twice is refused."""
    args = [_model_arg(entry) for entry in entries]
    names = [a.name for a in args]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(
                f"two models would be served as {name!r}: name one of them with NAME=PATH"
            )
    return args


def _model_arg(entry: str) -> ModelArg:
    entry = entry.strip()
    if entry in BUNDLED_NAMES:
        return ModelArg(entry)
    name, sep, text = entry.partition("=")
    if not sep or Path(entry).expanduser().exists():  # a path may hold '=' too
        name, text = "", entry
    path = Path(text).expanduser()
    if not path.exists():
        raise ValueError(
            f"{text}: no such file or folder (a model is a bundled name ("
            f"{', '.join(BUNDLED_NAMES)}), a .gguf file, a Hugging Face folder, or NAME=PATH)"
        )
    files = identify(path)  # ValueError naming the file and what is not supported
    name = name or (path.stem if path.is_file() else path.resolve().name)
    if not _NAME.fullmatch(name) or len(name) > 200:
        raise ValueError(
            f"{entry}: {name!r} cannot name a deployment (letters, digits, '.', '_' and '-', "
            "starting with a letter or digit): give one as NAME=PATH"
        )
    return ModelArg(name, path.resolve(), files)


def local_version(arg: ModelArg) -> VersionRef:
    """The version a model given by path is served as, its checksum computed (the whole
    artifact is read: call it off the event loop)."""
    assert arg.path is not None and arg.files is not None, f"{arg.name} is a bundled model"
    checksum = artifact_checksum(arg.path)
    version = f"sha256-{checksum[:12]}"
    return VersionRef(arg.name, version, arg.files.kind, arg.files.format, str(arg.path), checksum)


def is_local(ref: VersionRef) -> bool:
    """Whether `ref` was made by local_version (its version its checksum's name)."""
    return ref.checksum is not None and ref.version == f"sha256-{ref.checksum[:12]}"
