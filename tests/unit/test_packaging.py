"""The repository layout maps onto `vigil.*`, and a built wheel carries the whole package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_platform_from_the_root_is_the_standard_library() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import platform, uuid; print(platform.system(), platform.__file__)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    system, path = out.split()
    assert system == "Linux"
    assert not Path(path).is_relative_to(ROOT)


def test_the_gateway_runs_without_importing_torch() -> None:
    """torch is the workers' (about 250 MB resident once imported); the gateway process,
    its supervisor of local workers and the CLI must not pull it in."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import vigil.platform.cli, vigil.platform.app, vigil.platform.lifecycle\n"
        "import vigil.platform.worker.supervisor, vigil.platform.gateway.tokenizers\n"
        "from vigil.engine.bundled import MINILM, SMOLLM2, bundled_source\n"
        "from vigil.engine.loaders.gguf import GGUFFile\n"
        "from vigil.engine.loaders.embedder_tokenizer import read_embedding_tokenizer\n"
        "assert GGUFFile(bundled_source(SMOLLM2).path).tokenizer().encode('Hi')\n"
        "assert read_embedding_tokenizer(bundled_source(MINILM).path).encode('Hi')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-1500:]


def test_the_worker_imports_no_torch_compiler() -> None:
    """TorchInductor takes 2 s to import (llguidance.torch pulls it in through a
    torch.compile decorator); a worker's engine runs eagerly and must start without it."""
    code = (
        "import sys\n"
        "import vigil.platform.worker.server, vigil.engine.runner, vigil.engine.grammar_masks\n"
        "assert 'torch._inductor' not in sys.modules, 'TorchInductor was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-1500:]


@pytest.mark.slow
def test_wheel_contains_the_whole_package_and_its_cli_runs(tmp_path: Path) -> None:
    # Build from a copy, so that no build/ folder of an earlier build leaks stale files.
    source = tmp_path / "src"
    skip = shutil.ignore_patterns(
        ".git",
        ".venv",
        "node_modules",
        "build",
        "*.egg-info",
        "__pycache__",
        ".typecheck",
        "test-results",
        ".*_cache",
    )
    shutil.copytree(ROOT, source, ignore=skip)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(source),
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(tmp_path),
        ],
        cwd=source,
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("vigil-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    expected_dirs = {
        "engine": "vigil/engine",
        "platform": "vigil/platform",
        "web": "vigil/web",
        "migrations": "vigil/migrations",
    }
    for folder, package in expected_dirs.items():
        for source in (ROOT / folder).rglob("*.py"):
            rel = source.relative_to(ROOT / folder).as_posix()
            assert f"{package}/{rel}" in names, f"{package}/{rel} missing from the wheel"
    for asset in (
        "vigil/web/templates/base.html",
        "vigil/web/templates/console/index.html",
        "vigil/web/templates/console/_stats.html",
        "vigil/web/static/console.js",
        "vigil/web/static/vendor/htmx.min.js",
        "vigil/web/static/vendor/sse.min.js",
        "vigil/migrations/script.py.mako",
    ):
        assert asset in names, f"{asset} missing from the wheel"
    assert not any(n.startswith("platform/") or n == "platform.py" for n in names)

    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    where = subprocess.run(
        [sys.executable, "-c", "import vigil.platform.cli as c; print(c.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(target), f"imported {where}, not the wheel's copy"
    help_text = subprocess.run(
        [str(target / "bin" / "vigil"), "--help"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "serve" in help_text and "migrate" in help_text


def test_every_folder_of_the_package_is_declared_to_setuptools() -> None:
    """A folder setuptools finds under a declared package but not in `packages` is
    installed with a deprecation warning each (and would one day be left out). web/docs
    holds the README's screenshots, which the wheel does not carry."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(config["packages"])
    found = set()
    for package, folder in config["package-dir"].items():
        for path in [ROOT / folder, *(ROOT / folder).rglob("*")]:
            skipped = {"node_modules", "__pycache__", "docs"} & set(path.relative_to(ROOT).parts)
            if path.is_dir() and not skipped and any(p.is_file() for p in path.iterdir()):
                rel = path.relative_to(ROOT / folder).parts
                found.add(".".join((package, *rel)))
    assert found <= declared, f"add to [tool.setuptools] packages: {sorted(found - declared)}"
