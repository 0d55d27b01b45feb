"""Artifacts resolve to weights on disk, and weights that are not the registered ones
are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from vigil.engine.artifacts import (
    ArtifactError,
    artifact_checksum,
    resolve_artifact,
    verify_checksum,
)
from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.engine.loaders.progress import progress, report_progress


def test_folder_checksum_changes_with_any_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.bin").write_bytes(b"\x00" * 10)
    first = artifact_checksum(tmp_path)
    assert first == artifact_checksum(tmp_path)
    (tmp_path / "sub" / "w.bin").write_bytes(b"\x00" * 9 + b"\x01")
    assert artifact_checksum(tmp_path) != first
    (tmp_path / "sub" / "w.bin").write_bytes(b"\x00" * 10)
    (tmp_path / "extra.txt").write_text("x")
    assert artifact_checksum(tmp_path) != first


def test_file_checksum_is_its_sha256(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"abc")
    expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert artifact_checksum(path) == expected


def test_mismatched_checksum_refuses_the_version(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"weights")
    source = resolve_artifact("m", "2", str(path), ModelKind.GENERATE, ModelFormat.GGUF)
    verify_checksum(source, artifact_checksum(path))  # the registered bytes: fine
    verify_checksum(source, None)  # nothing registered: nothing to check
    with pytest.raises(ArtifactError, match="refusing to load different weights"):
        verify_checksum(source, "0" * 64)


def test_bundled_artifact_resolves_with_the_versions_name() -> None:
    source = resolve_artifact(
        "chat-model", "v7", "bundled:smollm2-135m-instruct", ModelKind.GENERATE, ModelFormat.GGUF
    )
    assert (source.name, source.version) == ("chat-model", "v7")
    assert source.path.name.endswith(".gguf")


@pytest.mark.parametrize(
    ("artifact", "kind", "fmt", "mentions"),
    [
        ("bundled:nope", ModelKind.GENERATE, ModelFormat.GGUF, "no bundled model"),
        ("bundled:all-minilm-l6-v2", ModelKind.GENERATE, ModelFormat.GGUF, "not generate"),
        ("/does/not/exist.gguf", ModelKind.GENERATE, ModelFormat.GGUF, "not a file"),
        ("/tmp", ModelKind.EMBED, ModelFormat.HF, "config.json"),
    ],
)
def test_unusable_artifacts_say_why(
    artifact: str, kind: ModelKind, fmt: ModelFormat, mentions: str
) -> None:
    with pytest.raises(ArtifactError, match=mentions):
        resolve_artifact("m", "1", artifact, kind, fmt)


def test_loading_loops_report_their_progress_to_a_listener() -> None:
    seen: list[float] = []
    with report_progress(seen.append):
        assert list(progress(["a", "b", "c", "d"], "loading", unit="tensor")) == list("abcd")
    assert seen == [0.25, 0.5, 0.75, 1.0]
    list(progress(["e"], "loading", unit="tensor"))  # outside the block: nobody listens
    assert seen == [0.25, 0.5, 0.75, 1.0]
