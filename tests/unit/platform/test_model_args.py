"""`vigil serve [MODEL ...]` and the deployments file's `[[models]]`: what a MODEL may be
(a bundled name, a .gguf file, a Hugging Face folder, NAME=PATH), the deployment each
becomes, and the refusals, before any worker starts, that name the file and what is
not supported. The model folders are the files identify() reads (no weights)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from unit.engine.test_identify import folder, write_header

from vigil.engine.artifacts import artifact_checksum
from vigil.engine.bundled import MINILM, SMOLLM2, ModelFormat, ModelKind
from vigil.engine.loaders.identify import ModelFiles
from vigil.platform.cli import main
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.deployments.config_file import ConfigError, load_declarations
from vigil.platform.control.migrate import migrate
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.specs import VersionRef
from vigil.platform.control.versions.local import local_version, model_args


def local(name: str, path: Path) -> VersionRef:
    (arg,) = model_args([f"{name}={path}"])
    return local_version(arg)


LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}


def test_each_model_is_served_under_its_file_or_folder_name_or_the_one_given(
    tmp_path: Path,
) -> None:
    chat = folder(tmp_path / "my-chat", LLAMA)
    gguf = write_header(tmp_path / "tiny.Q4_0.gguf", "qwen2", "gpt2")
    given = [SMOLLM2, str(chat), str(gguf), f"embedder={chat}"]
    assert [(a.name, a.path) for a in model_args(given)] == [
        (SMOLLM2, None),
        ("my-chat", chat),
        ("tiny.Q4_0", gguf),
        ("embedder", chat),
    ]
    assert model_args([str(gguf)])[0].files == ModelFiles(
        ModelKind.GENERATE, ModelFormat.GGUF, "qwen2"
    )
    odd = folder(tmp_path / "a=b", LLAMA)  # a path holding '=' is a path, named as given
    with pytest.raises(ValueError, match=r"'a=b' cannot name a deployment"):
        model_args([str(odd)])
    assert [(a.name, a.path) for a in model_args([f"odd={odd}"])] == [("odd", odd)]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("{tmp}/nothing", r"nothing: no such file or folder \(a model is a bundled name"),
        ("{tmp}/a.txt", r"a.txt: not a GGUF file"),
        ("{tmp}/b.gguf", r"b.gguf: architecture 'bert' is not supported"),
        ("{tmp}/gpt2", r"gpt2: model_type 'gpt2' is not supported for generation"),
        ("bad name={tmp}/my-chat", r"'bad name' cannot name a deployment"),
    ],
)
def test_a_model_that_cannot_be_served_is_refused_naming_the_file_and_why(
    tmp_path: Path, entry: str, problem: str
) -> None:
    folder(tmp_path / "my-chat", LLAMA)
    folder(tmp_path / "gpt2", {"model_type": "gpt2"})
    (tmp_path / "a.txt").write_text("not a model")
    write_header(tmp_path / "b.gguf", "bert", "bert")
    with pytest.raises(ValueError, match=problem):
        model_args([entry.format(tmp=tmp_path)])


def test_two_models_of_one_name_are_refused(tmp_path: Path) -> None:
    chat = folder(tmp_path / "a" / "chat", LLAMA)
    other = folder(tmp_path / "b" / "chat", LLAMA)
    with pytest.raises(ValueError, match="two models would be served as 'chat'"):
        model_args([str(chat), str(other)])
    assert [a.name for a in model_args([str(chat), f"chat-b={other}"])] == ["chat", "chat-b"]


def test_vigil_serve_exits_2_naming_an_unsupported_file_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("not a model")
    data = tmp_path / "data"
    assert main(["serve", "--data-dir", str(data), str(tmp_path / "notes.txt")]) == 2
    err = capsys.readouterr().err
    assert f"vigil serve: {tmp_path / 'notes.txt'}: not a GGUF file" in err
    assert not (data / "vigil.db").exists()  # nothing was started, not even the database


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        ('[[models]]\nname = "x"\n', "expected one or more [[deployments]] tables"),
        (
            f'[[deployments]]\nname = "chat"\nmodel = "{SMOLLM2}"\n'
            f'[[versions]]\nmodel = "{SMOLLM2}"\nversion = "hot"\n'
            f'artifact = "bundled:{SMOLLM2}"\nformat = "gguf"\nparams = {{ temperature = 7 }}\n',
            "params.temperature = 7 is not allowed",
        ),
        (
            '[[deployments]]\nname = "chat"\nmodel = "nobody"\n',
            "deployments[0]: unknown model 'nobody'",
        ),
    ],
)
def test_vigil_serve_exits_2_naming_a_mistake_in_its_deployments_file_before_it_listens(
    tmp_path: Path, toml: str, says: str
) -> None:
    """In a process of its own, so that a server which starts anyway fails the test at
    the timeout instead of serving on."""
    config = tmp_path / "vigil.toml"
    config.write_text(toml)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    args = ["serve", "--data-dir", str(tmp_path / "data"), "--config", str(config)]
    code = "import sys; from vigil.platform.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, *args, "--workers", "0", "--port", port],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"vigil serve: {config}" in done.stderr and says in done.stderr
    assert "Traceback" not in done.stderr


def test_a_path_is_a_version_named_for_its_bytes(tmp_path: Path) -> None:
    chat = folder(tmp_path / "chat", LLAMA)
    ref = local("chat", chat)
    checksum = artifact_checksum(chat)
    assert (ref.model, ref.version, ref.checksum) == ("chat", f"sha256-{checksum[:12]}", checksum)
    assert (ref.kind, ref.format, ref.artifact) == (ModelKind.GENERATE, ModelFormat.HF, str(chat))


def test_the_deployments_file_declares_a_model_by_path_with_versions_and_a_canary(
    tmp_path: Path,
) -> None:
    chat = folder(tmp_path / "models" / "chat", LLAMA)
    newer = folder(tmp_path / "models" / "chat-2", LLAMA | {"rope_theta": 5.0})
    path = tmp_path / "vigil.toml"
    path.write_text(f"""
[[models]]
name = "mine"
artifact = "models/chat"            # relative to the file's folder

[[versions]]
model = "mine"
version = "two"
artifact = "{newer}"
format = "hf"

[[deployments]]
name = "mine"
canary = {{ version = "two", weight = 10 }}
""")
    (spec,), _ = load_declarations(path, {SMOLLM2})
    assert spec.stable == local("mine", chat.resolve())
    assert spec.canary is not None and spec.canary.key == "mine@two"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '[[versions]]\nmodel = "mine"\nversion = "x"\nartifact = "a.gguf"\n'
            '[[deployments]]\nname = "mine"\n',
            r"versions\[0\]: unknown model 'mine' \(known: smollm2-135m-instruct; declare one "
            r"with \[\[models\]\]\)",
        ),
        (
            '[[models]]\nname = "mine"\nartifact = "missing.gguf"\n'
            '[[deployments]]\nname = "mine"\n',
            r"models\[0\]: .*missing.gguf: no such file or folder",
        ),
        (
            '[[models]]\nname = "mine"\n[[deployments]]\nname = "mine"\n',
            r"models\[0\]: a \[\[models\]\] entry takes name and artifact",
        ),
        (
            f'[[models]]\nname = "{SMOLLM2}"\nartifact = "chat"\n[[deployments]]\nname = "x"\n'
            f'model = "{SMOLLM2}"\n',
            rf"model '{SMOLLM2}' is declared twice",
        ),
    ],
)
def test_the_deployments_file_names_the_models_entry_to_fix(
    tmp_path: Path, text: str, problem: str
) -> None:
    folder(tmp_path / "chat", LLAMA)
    path = tmp_path / "vigil.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem):
        load_declarations(path, {SMOLLM2})


async def test_a_model_given_by_path_is_deployed_and_follows_its_file(tmp_path: Path) -> None:
    """Its deployment is made under its name; a changed file is a new version that the
    deployment moves to at the next start; the bundled models stay out unless named."""
    db = tmp_path / "vigil.db"
    await asyncio.to_thread(migrate, f"sqlite+aiosqlite:///{db}")
    engine = create_engine(f"sqlite+aiosqlite:///{db}")
    plane = ControlPlane(session_factory(engine))
    chat = folder(tmp_path / "chat", LLAMA)
    try:
        await plane.declare([f"mine={chat}"], None)
        (spec,) = await plane.serving_view()
        first = local("mine", chat)
        assert (spec.name, spec.stable) == ("mine", first)
        (chat / "config.json").write_text((chat / "config.json").read_text() + " ")
        await plane.declare([f"mine={chat}", MINILM], None)
        view = {s.name: s for s in await plane.serving_view()}
        assert view["mine"].stable == local("mine", chat) != first
        assert set(view) == {"mine", MINILM}  # an embedder named is deployed beside it
    finally:
        await engine.dispose()
