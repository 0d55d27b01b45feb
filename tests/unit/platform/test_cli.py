"""`vigil keys`: create prints a key once, list never shows it, revoke ends it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vigil.platform.cli import main


def create_key(data_dir: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    assert main(["keys", "create", "--data-dir", str(data_dir), *flags]) == 0
    out, err = capsys.readouterr()
    assert "will not be shown again" in err
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vgl_")
    return lines[0]


def test_keys_create_list_and_revoke_on_a_fresh_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "fresh" / "data"  # does not exist yet
    flags = ["--name", "ci", "--priority", "batch", "--models", "a,b", "--rate-limit", "60"]
    key = create_key(data_dir, capsys, *flags)
    create_key(data_dir, capsys, "--name", "web")

    assert main(["keys", "list", "--data-dir", str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert key not in out and key[12:] not in out
    header, ci, web = out.splitlines()
    assert header.split() == [
        "NAME",
        "PREFIX",
        "PRIORITY",
        "MODELS",
        "RATE/MIN",
        "CREATED",
        "REVOKED",
    ]
    assert ci.split()[:5] == ["ci", key[:12] + "...", "batch", "a,b", "60"]
    assert ci.split()[-1] == "-"
    assert web.split()[:5] == ["web", web.split()[1], "interactive", "all", "-"]

    assert main(["keys", "revoke", "ci", "--data-dir", str(data_dir)]) == 0
    assert "revoked API key 'ci'" in capsys.readouterr().out
    main(["keys", "list", "--data-dir", str(data_dir)])
    ci_row = capsys.readouterr().out.splitlines()[1]
    assert ci_row.startswith("ci ") and ci_row.endswith("Z")  # a revoked time


def test_keys_errors_print_a_message_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'vigil.db'}"
    assert main(["keys", "create", "--name", "dup", "--database-url", url]) == 0
    capsys.readouterr()
    for argv in (
        ["keys", "create", "--name", "dup", "--database-url", url],
        ["keys", "create", "--name", "x", "--rate-limit", "0", "--database-url", url],
        ["keys", "revoke", "nobody", "--database-url", url],
    ):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("vigil: ") and "Traceback" not in err


def test_keys_list_on_an_empty_database_says_how_to_create_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "list", "--data-dir", str(tmp_path)]) == 0
    assert "vigil keys create" in capsys.readouterr().out
