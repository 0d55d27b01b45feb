"""A model path's kind and format from its own files, or a refusal that names the path
and what is not supported; without reading weights or importing torch."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import pytest

from vigil.engine.bundled import MINILM, SMOLLM2, ModelFormat, ModelKind, bundled_source
from vigil.engine.loaders.identify import ModelFiles, identify
from vigil.engine.model.config import DECODER_TYPES
from vigil.engine.model.families import FAMILIES


def folder(path: Path, config: dict[str, Any], *, modules: bool = False) -> Path:
    """The files identify reads (the weights file only has to be there)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"hidden_size": 64} | config))
    (path / "model.safetensors").write_bytes(b"")
    (path / "tokenizer.json").write_text("{}")
    if modules:
        (path / "1_Pooling").mkdir(exist_ok=True)
        (path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "lasttoken"}))
        listed = [{"path": "", "type": "Transformer"}, {"path": "1_Pooling", "type": "Pooling"}]
        (path / "modules.json").write_text(json.dumps(listed))
    return path


@pytest.mark.slow  # parses the bundled GGUF's header: seconds
def test_the_bundled_models_are_what_they_are() -> None:
    chat, embedder = bundled_source(SMOLLM2), bundled_source(MINILM)
    assert identify(chat.path) == ModelFiles(ModelKind.GENERATE, ModelFormat.GGUF, "llama")
    assert identify(embedder.path) == ModelFiles(ModelKind.EMBED, ModelFormat.HF, "bert")


def test_a_decoder_folder_generates_and_a_sentence_transformers_one_embeds(tmp_path: Path) -> None:
    llama = folder(
        tmp_path / "llama", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    )
    assert identify(llama) == ModelFiles(ModelKind.GENERATE, ModelFormat.HF, "llama")
    qwen = folder(
        tmp_path / "qwen", {"model_type": "qwen2", "architectures": ["Qwen2Model"]}, modules=True
    )
    assert identify(qwen) == ModelFiles(ModelKind.EMBED, ModelFormat.HF, "qwen2")


def write_header(path: Path, arch: str, tokenizer: str) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_tokenizer_model(tokenizer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def text_file(path: Path) -> Path:
    (path / "a.txt").write_text("not a model")
    return path / "a.txt"


REFUSED: dict[str, tuple[Callable[[Path], Path], str]] = {
    "missing": (lambda p: p / "nothing", r"nothing: no such file or folder"),
    "not-gguf": (text_file, r"a.txt: not a GGUF file"),
    "gguf-bert": (
        lambda p: write_header(p / "b.gguf", "bert", "bert"),
        r"b.gguf: architecture 'bert' is not supported",
    ),
    "gguf-t5-tokenizer": (
        lambda p: write_header(p / "t.gguf", "llama", "t5"),
        r"t.gguf: tokenizer 't5' is not supported \(gpt2, llama\)",
    ),
    "no-config": (lambda p: p, r": no config.json \(a model folder is a Hugging Face checkpoint"),
    "gpt2": (
        lambda p: folder(p / "gpt2", {"model_type": "gpt2"}),
        r"gpt2: model_type 'gpt2' is not supported for generation \(llama, ",
    ),
    "bert-without-modules": (
        lambda p: folder(p / "bert", {"model_type": "bert"}),
        r"bert: a bert encoder without sentence-transformers' modules.json",
    ),
    "no-head": (
        lambda p: folder(p / "bare", {"model_type": "qwen2", "architectures": ["Qwen2Model"]}),
        r"bare: \['Qwen2Model'\] has no language-model head",
    ),
    "t5-embedder": (
        lambda p: folder(p / "t5", {"model_type": "t5"}, modules=True),
        r"t5: model_type 't5' is not supported for embeddings",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_cannot_be_served_is_refused_naming_the_path(tmp_path: Path, case: str) -> None:
    make, message = REFUSED[case]
    with pytest.raises(ValueError, match=message):
        identify(make(tmp_path))


def test_folders_without_weights_or_tokenizer_are_refused(tmp_path: Path) -> None:
    path = folder(tmp_path / "m", {"model_type": "llama"})
    (path / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match=r"m: no tokenizer.json"):
        identify(path)
    (path / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"m: no \*.safetensors weights"):
        identify(path)


def test_identifying_imports_no_torch() -> None:
    code = "import sys, vigil.engine.loaders.identify; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_decoder_types_are_the_families() -> None:
    assert tuple(FAMILIES) == DECODER_TYPES
