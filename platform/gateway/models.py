"""Which model names the gateway can serve, and the errors for those it cannot."""

from __future__ import annotations

from vigil.engine.async_engine import AsyncLLMEngine
from vigil.engine.bundled import ModelKind
from vigil.engine.embed_batcher import AsyncEmbedder
from vigil.platform.errors import InvalidRequest, ModelNotFound, ServiceUnavailable
from vigil.platform.telemetry.metrics import EngineSnapshot
from vigil.platform.worker.local import LocalWorker, ModelState


class ModelDirectory:
    def __init__(self, worker: LocalWorker) -> None:
        self.worker = worker

    def names(self) -> list[str]:
        return [s.name for s in self.worker.sources]

    def llm(self, name: str) -> AsyncLLMEngine:
        engine = self.worker.llms.get(name)
        if engine is None:
            self._explain(name, ModelKind.GENERATE)
        assert engine is not None
        return engine

    def embedder(self, name: str) -> AsyncEmbedder:
        embedder = self.worker.embedders.get(name)
        if embedder is None:
            self._explain(name, ModelKind.EMBED)
        assert embedder is not None
        return embedder

    def _explain(self, name: str, wanted: ModelKind) -> None:
        source = next((s for s in self.worker.sources if s.name == name), None)
        if source is None:
            raise ModelNotFound(name, self.names())
        if source.kind is not wanted:
            endpoint = (
                "/v1/embeddings"
                if source.kind is ModelKind.EMBED
                else ("/v1/chat/completions or /v1/completions")
            )
            raise InvalidRequest(
                f"The model '{name}' is a {source.kind.value} model; use {endpoint}.",
                param="model",
                code="wrong_model_kind",
            )
        state = self.worker.states[name]
        if state is ModelState.FAILED:
            raise ServiceUnavailable(
                f"The model '{name}' failed to load: {self.worker.errors.get(name)}",
                code="model_failed",
            )
        raise ServiceUnavailable(
            f"The model '{name}' is still loading; retry shortly.",
            code="model_loading",
            headers={"Retry-After": "5"},
        )

    def snapshots(self) -> list[EngineSnapshot]:
        return [EngineSnapshot(name, engine.stats()) for name, engine in self.worker.llms.items()]
