"""Which way imports run (ARCHITECTURE.md): read from each module's own import
statements, so that a layer reaching the wrong way fails here, not in review."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imports_of(path: Path) -> set[str]:
    """The absolute module names a file imports, at any depth of its code."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def files(folder: str) -> list[Path]:
    found = sorted((ROOT / folder).rglob("*.py"))
    assert found, f"no Python files under {folder}"
    return found


def reaching(folder: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    """Each file under `folder` that imports a module under one of `forbidden`."""
    hits: dict[str, list[str]] = {}
    for path in files(folder):
        bad = [
            name
            for name in sorted(imports_of(path))
            if any(name == f or name.startswith(f + ".") for f in forbidden)
        ]
        if bad:
            hits[str(path.relative_to(ROOT))] = bad
    return hits


def test_imports_of_reads_every_form_of_import(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import vigil.platform.api.errors\n"
        "from vigil.platform.api import streaming\n"
        "def late():\n    from vigil.engine.request import FinishEvent\n"
        "from . import near\n"
    )
    assert imports_of(source) == {
        "vigil.platform.api.errors",
        "vigil.platform.api",
        "vigil.platform.api.streaming",
        "vigil.engine.request",
        "vigil.engine.request.FinishEvent",
    }


def test_the_worker_does_not_import_the_api() -> None:
    assert reaching("platform/worker", ("vigil.platform.api",)) == {}


def test_the_wire_records_import_neither_side() -> None:
    sides = ("vigil.platform.api", "vigil.platform.gateway", "vigil.platform.worker")
    assert reaching("platform/wire", sides) == {}


def test_the_console_does_not_import_the_api() -> None:
    assert reaching("web", ("vigil.platform.api",)) == {}


def test_the_apis_streaming_does_not_import_the_engine() -> None:
    path = ROOT / "platform/api/streaming.py"
    assert not [n for n in imports_of(path) if n.startswith("vigil.engine")]


@pytest.mark.parametrize(
    "module", ["vigil.platform.worker.server", "vigil.platform.worker.runtime"]
)
def test_the_gateway_does_not_import_the_workers_process(module: str) -> None:
    assert reaching("platform/gateway", (module,)) == {}


@pytest.mark.parametrize("folder", ["platform/telemetry", "platform/slo", "platform/control"])
def test_telemetry_slos_and_the_control_plane_import_neither_the_gateway_nor_the_api(
    folder: str,
) -> None:
    assert reaching(folder, ("vigil.platform.gateway", "vigil.platform.api")) == {}


def test_the_engine_imports_nothing_of_the_platform() -> None:
    assert reaching("engine", ("vigil.platform", "vigil.web")) == {}
