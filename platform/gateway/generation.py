"""From a validated API body to an engine request, and the engine's events back.

Rules that need the model (its tokenizer, its context window) live here:
the chat template, token counts, max_tokens defaults and limits.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from vigil.engine.async_engine import AsyncLLMEngine
from vigil.engine.llm_engine import RequestRejected
from vigil.engine.request import (
    EngineEvent,
    GenerationRequest,
    Priority,
    RequestClock,
    RequestId,
    SamplingParams,
)
from vigil.engine.tokenizer import ChatMessage, ChatTemplateError
from vigil.platform.api.openai_schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    SamplingFields,
)
from vigil.platform.errors import InvalidRequest
from vigil.platform.gateway.models import ModelDirectory
from vigil.platform.telemetry.recorder import RequestRecorder


@dataclass(frozen=True, slots=True)
class PreparedGeneration:
    deployment: str
    engine: AsyncLLMEngine
    request: GenerationRequest


class GenerationService:
    def __init__(
        self, models: ModelDirectory, recorder: RequestRecorder, max_queue_wait_s: float
    ) -> None:
        self.models = models
        self.recorder = recorder
        self.max_queue_wait_s = max_queue_wait_s

    def prepare_chat(self, body: ChatCompletionRequest, arrival_ts: float) -> PreparedGeneration:
        engine = self.models.llm(body.model)
        tokenizer = engine.core.lm.tokenizer
        _check_supported(body)
        messages = [
            ChatMessage(m.role if m.role != "developer" else "system", m.text())
            for m in body.messages
        ]
        try:
            prompt = tokenizer.render_chat(messages)
        except ChatTemplateError as exc:
            raise InvalidRequest(str(exc), param="messages") from exc
        ids = tokenizer.encode(prompt)
        max_tokens = body.max_completion_tokens or body.max_tokens
        return self._prepare(body, engine, ids, max_tokens, "chatcmpl", "messages", arrival_ts)

    def prepare_completion(self, body: CompletionRequest, arrival_ts: float) -> PreparedGeneration:
        engine = self.models.llm(body.model)
        _check_supported(body)
        if body.echo:
            raise InvalidRequest(
                "echo is not supported; leave it false", param="echo", code="unsupported_parameter"
            )
        if isinstance(body.prompt, str):
            ids = engine.core.lm.tokenizer.encode(body.prompt)
        else:
            vocab = engine.core.lm.config.vocab_size
            bad = next((t for t in body.prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise InvalidRequest(
                    f"token id {bad} in 'prompt' is outside this model's vocabulary "
                    f"(0 to {vocab - 1})",
                    param="prompt",
                )
            ids = list(body.prompt)
        return self._prepare(body, engine, ids, body.max_tokens, "cmpl", "prompt", arrival_ts)

    def _prepare(
        self,
        body: SamplingFields,
        engine: AsyncLLMEngine,
        ids: list[int],
        max_tokens: int | None,
        id_prefix: str,
        prompt_param: str,
        arrival_ts: float,
    ) -> PreparedGeneration:
        limit = min(engine.core.max_model_len, engine.core.kv_capacity_tokens)
        if not ids:
            raise InvalidRequest("the prompt is empty", param=prompt_param)
        if len(ids) >= limit:
            raise InvalidRequest(
                f"This model's maximum context length is {limit} tokens, but the prompt has "
                f"{len(ids)} tokens. Shorten the {prompt_param} to fewer than {limit} tokens.",
                param=prompt_param,
                code="context_length_exceeded",
            )
        if max_tokens is not None and len(ids) + max_tokens > limit:
            raise InvalidRequest(
                f"This model's maximum context length is {limit} tokens. You requested "
                f"{len(ids) + max_tokens} tokens ({len(ids)} in the prompt, {max_tokens} for "
                f"the completion). Lower max_tokens to at most {limit - len(ids)}.",
                param="max_tokens",
                code="context_length_exceeded",
            )
        params = SamplingParams(
            max_tokens=max_tokens if max_tokens is not None else limit - len(ids),
            temperature=1.0 if body.temperature is None else body.temperature,
            top_k=max(0, body.top_k or 0),
            top_p=1.0 if body.top_p is None else body.top_p,
            seed=body.seed,
            stop=body.stop_strings(),
            ignore_eos=body.ignore_eos,
        )
        request = GenerationRequest(
            request_id=RequestId(f"{id_prefix}-{uuid.uuid4().hex}"),
            prompt_ids=ids,
            params=params,
            priority=Priority.INTERACTIVE,
            clock=RequestClock(arrival_ts),
            deadline_ts=arrival_ts + self.max_queue_wait_s,
        )
        try:
            engine.check_request(request)
        except RequestRejected as exc:
            raise InvalidRequest(
                str(exc), param=prompt_param, code="context_length_exceeded"
            ) from exc
        return PreparedGeneration(body.model, engine, request)

    async def events(self, prepared: PreparedGeneration) -> AsyncIterator[EngineEvent]:
        """The engine's events for one request, each also recorded as metrics."""
        tracker = self.recorder.track(prepared.deployment, prepared.request.clock.arrival_ts)
        try:
            async for event in prepared.engine.generate(prepared.request):
                tracker.observe(event)
                yield event
        finally:
            tracker.close()


def _check_supported(body: SamplingFields) -> None:
    problem = body.unsupported()
    if problem is not None:
        field, advice = problem
        raise InvalidRequest(
            f"'{field}' is not supported: {advice}", param=field, code="unsupported_parameter"
        )
