"""`vigil keys`: create prints a key once, list never shows it, revoke ends it.
`vigil admin create`: a user of the console and the admin API."""

from __future__ import annotations

import asyncio
import io
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


def admin_create(data_dir: Path, *flags: str) -> int:
    return main(["admin", "create", "--data-dir", str(data_dir), *flags])


async def authenticate(data_dir: Path, username: str, password: str):  # type: ignore[no-untyped-def]
    from vigil.platform.control.db import create_engine, session_factory
    from vigil.platform.control.plane import ControlPlane

    engine = create_engine(f"sqlite+aiosqlite:///{data_dir / 'vigil.db'}")
    try:
        plane = ControlPlane(session_factory(engine))
        return await plane.users.authenticate(username, password), await plane.audit.list("user")
    finally:
        await engine.dispose()


def test_admin_create_reads_the_password_from_stdin_and_audits_as_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("correct horse battery\n"))
    assert admin_create(tmp_path / "data", "--username", "root", "--password-stdin") == 0
    out = capsys.readouterr().out
    assert "created admin 'root'" in out and "correct horse" not in out

    user, audit = asyncio.run(authenticate(tmp_path / "data", "root", "correct horse battery"))
    assert user is not None and user.role.value == "admin"
    assert [(e.actor, e.action, e.entity_name) for e in audit] == [("cli", "user.create", "root")]


def test_admin_create_prompts_twice_and_refuses_a_mismatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = iter(["operator pass", "operator pass", "one password", "another one"])
    prompts: list[str] = []

    def fake_getpass(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    monkeypatch.setattr("getpass.getpass", fake_getpass)
    assert admin_create(tmp_path, "--username", "ops", "--role", "operator") == 0
    assert prompts == ["Password: ", "Password again: "]
    assert "created operator 'ops'" in capsys.readouterr().out

    assert admin_create(tmp_path, "--username", "eve") == 2
    assert "the two passwords differ" in capsys.readouterr().err


def test_admin_create_errors_print_a_message_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for stdin, username, message in (
        ("long enough\n", "root", ""),
        ("long enough\n", "root", "already exists"),
        ("short\n", "bob", "8 to 1024 characters"),
        ("long enough\n", "no spaces", "not a valid name"),
    ):
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = admin_create(tmp_path, "--username", username, "--password-stdin")
        out, err = capsys.readouterr()
        if not message:
            assert code == 0
            continue
        assert code == 2 and out == "" and err.startswith("vigil: ") and message in err
        assert "Traceback" not in err


def test_a_command_run_away_from_the_servers_database_says_it_made_a_new_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "elsewhere"
    assert main(["keys", "list", "--data-dir", str(data_dir)]) == 0
    err = capsys.readouterr().err
    assert f"no database at {data_dir / 'vigil.db'}" in err and "--data-dir" in err
    assert main(["keys", "list", "--data-dir", str(data_dir)]) == 0
    assert "no database" not in capsys.readouterr().err  # found the second time
