"""The gateway's copy of each version's tokenizer: a generation version's with its chat
template, an embedding version's with its window.

The gateway tokenizes (caps and admission need token counts before a request is
queued); the workers only ever see token ids. Loading reads the model's metadata,
not its weights, in a thread, once per version.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from vigil.engine.artifacts import resolve_artifact
from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.engine.loaders import hf
from vigil.engine.loaders.embedder_tokenizer import read_embedding_tokenizer
from vigil.engine.loaders.gguf import GGUFFile
from vigil.engine.tokenizer import Tokenizer
from vigil.platform.control.specs import VersionRef
from vigil.platform.errors import ServiceUnavailable

log = logging.getLogger(__name__)


def load_tokenizer(version: VersionRef) -> Tokenizer:
    source = resolve_artifact(
        version.model, version.version, version.artifact, version.kind, version.format
    )
    if version.kind is ModelKind.EMBED:
        return read_embedding_tokenizer(source.path)
    if source.format is ModelFormat.GGUF:
        return GGUFFile(source.path).tokenizer()
    config = hf.read_config(source.path)
    return hf.read_tokenizer(source.path, config, add_special_tokens=True)


class TokenizerCache:
    def __init__(self, load: Callable[[VersionRef], Tokenizer] = load_tokenizer) -> None:
        self._load_one = load
        self._tokenizers: dict[str, Tokenizer] = {}
        self._loading: dict[str, asyncio.Task[None]] = {}
        self.errors: dict[str, str] = {}

    def get(self, version: VersionRef) -> Tokenizer | None:
        """The tokenizer, or None while it loads (loading starts on the first ask)."""
        tokenizer = self._tokenizers.get(version.key)
        if tokenizer is None and version.key not in self._loading:
            self._loading[version.key] = asyncio.create_task(self._load(version))
        return tokenizer

    def require(self, version: VersionRef) -> Tokenizer:
        """The tokenizer, or ServiceUnavailable: still loading (retry shortly), or failed."""
        tokenizer = self.get(version)
        if tokenizer is not None:
            return tokenizer
        if version.key in self.errors:
            raise ServiceUnavailable(
                f"The tokenizer of '{version.key}' failed to load: {self.errors[version.key]}",
                code="model_failed",
            )
        raise ServiceUnavailable(
            f"The model version '{version.key}' is still loading; retry shortly.",
            code="model_loading",
            retry_after_s=5,
        )

    async def _load(self, version: VersionRef) -> None:
        try:
            self._tokenizers[version.key] = await asyncio.to_thread(self._load_one, version)
            self.errors.pop(version.key, None)
        except Exception as exc:
            log.exception("could not load the tokenizer of %s", version.key)
            self.errors[version.key] = str(exc)
        finally:
            self._loading.pop(version.key, None)
