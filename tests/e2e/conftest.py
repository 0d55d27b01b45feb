"""Playwright drives Debian's Chromium; its own browser download cannot work here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "headless": True,
        "args": [
            "--disable-gpu",
            "--disable-quic",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
        ],
    }


@pytest.fixture(scope="module")
def api_key(data_dir: Path) -> str:
    """A key for the traffic a journey drives, made with `vigil keys create` in the
    module's own `data_dir` before its server starts."""
    vigil = Path(sys.executable).with_name("vigil")
    made = subprocess.run(
        [str(vigil), "keys", "create", "--name", "load", "--data-dir", str(data_dir)],
        check=True,
        capture_output=True,
        text=True,
    )
    return made.stdout.split()[0]
