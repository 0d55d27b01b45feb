"""From a validated API body to an admitted engine request, and the engine's events back.

body -> deployment (404) -> key may use it (403) -> version (canary split)
     -> prompt ids (that version's chat template) -> caps (400 context_length_exceeded,
     or the long-prompt pool) -> worker (router) -> admission: admit | fall back | shed
     (429 + Retry-After) -> engine request with its queue deadline
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from vigil.engine.llm_engine import RequestRejected
from vigil.engine.request import (
    EngineEvent,
    GenerationRequest,
    RequestClock,
    RequestId,
    SamplingParams,
)
from vigil.engine.tokenizer import ChatMessage, ChatTemplateError, Tokenizer
from vigil.platform.api.openai_schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    SamplingFields,
)
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.errors import InvalidRequest, PermissionDenied, RateLimited
from vigil.platform.gateway.admission import Admission, Verdict, decide
from vigil.platform.gateway.auth import Principal
from vigil.platform.gateway.models import ModelDirectory, Target
from vigil.platform.gateway.remote import RemoteEngine
from vigil.platform.telemetry.recorder import RequestRecorder


@dataclass(frozen=True, slots=True)
class PreparedGeneration:
    deployment: str  # the deployment that serves it (the fallback's name after a fallback)
    served_by: str  # model/version
    fallback_from: str | None
    target: Target
    request: GenerationRequest

    @property
    def engine(self) -> RemoteEngine:
        return self.target.engine


@dataclass(frozen=True, slots=True)
class _Prompt:
    ids: list[int]
    max_tokens: int | None
    id_prefix: str
    param: str  # the request field the prompt came from, for error messages


PromptBuilder = Callable[[Tokenizer], _Prompt]


class GenerationService:
    def __init__(self, models: ModelDirectory, recorder: RequestRecorder) -> None:
        self.models = models
        self.recorder = recorder

    def prepare_chat(
        self, body: ChatCompletionRequest, principal: Principal, arrival_ts: float
    ) -> PreparedGeneration:
        spec = self._deployment(body.model, principal)
        _check_supported(body)
        messages = [
            ChatMessage(m.role if m.role != "developer" else "system", m.text())
            for m in body.messages
        ]
        max_tokens = body.max_completion_tokens or body.max_tokens

        def build(tokenizer: Tokenizer) -> _Prompt:
            try:
                text = tokenizer.render_chat(messages)
            except ChatTemplateError as exc:
                raise InvalidRequest(str(exc), param="messages") from exc
            return _Prompt(tokenizer.encode(text), max_tokens, "chatcmpl", "messages")

        return self._admit(spec, body, build, principal, arrival_ts)

    def prepare_completion(
        self, body: CompletionRequest, principal: Principal, arrival_ts: float
    ) -> PreparedGeneration:
        spec = self._deployment(body.model, principal)
        _check_supported(body)
        if body.echo:
            raise InvalidRequest(
                "echo is not supported; leave it false", param="echo", code="unsupported_parameter"
            )

        def build(tokenizer: Tokenizer) -> _Prompt:
            if isinstance(body.prompt, str):
                return _Prompt(tokenizer.encode(body.prompt), body.max_tokens, "cmpl", "prompt")
            vocab = tokenizer.vocab_size
            bad = next((t for t in body.prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise InvalidRequest(
                    f"token id {bad} in 'prompt' is outside this model's vocabulary "
                    f"(0 to {vocab - 1})",
                    param="prompt",
                )
            return _Prompt(list(body.prompt), body.max_tokens, "cmpl", "prompt")

        return self._admit(spec, body, build, principal, arrival_ts)

    def _deployment(self, name: str, principal: Principal) -> DeploymentSpec:
        spec = self.models.deployment(name)
        if not principal.may_use(spec.name):
            raise PermissionDenied(
                f"This API key may not use the model '{name}'.",
                param="model",
                code="model_not_allowed",
            )
        return spec

    def _admit(
        self,
        spec: DeploymentSpec,
        body: SamplingFields,
        build: PromptBuilder,
        principal: Principal,
        arrival_ts: float,
    ) -> PreparedGeneration:
        """Route and admit on the deployment; on a fallback verdict, the same again on
        the fallback deployment (tokenized with its own version), without fallback."""
        priority = principal.priority
        prompt, target, max_tokens = self._route(spec, build)
        admission = decide(priority, len(prompt.ids), target.snapshot(), spec)
        fallback_from = None
        if admission.verdict is Verdict.FALLBACK:
            assert spec.fallback is not None
            self.recorder.record_admission(spec.name, admission)
            fallback = self.models.deployment(spec.fallback.deployment)
            if self.models.is_ready(fallback):  # a fallback still loading is no help
                fallback_from, spec = spec.name, fallback
                prompt, target, max_tokens = self._route(spec, build)
            admission = decide(
                priority, len(prompt.ids), target.snapshot(), spec, allow_fallback=False
            )
        self.recorder.record_admission(spec.name, admission)
        if admission.verdict is Verdict.SHED:
            raise _shed_error(spec, admission)
        if body.min_tokens > max_tokens:
            raise InvalidRequest(
                f"min_tokens ({body.min_tokens}) is over the {max_tokens} tokens this request "
                "may generate; lower min_tokens.",
                param="min_tokens",
            )
        request = GenerationRequest(
            request_id=RequestId(f"{prompt.id_prefix}-{uuid.uuid4().hex}"),
            prompt_ids=prompt.ids,
            params=_sampling(body, target.version, max_tokens),
            priority=priority,
            clock=RequestClock(arrival_ts),
            deadline_ts=arrival_ts + spec.limits[priority].max_queue_wait_s,
        )
        try:
            target.engine.check_request(request)
        except RequestRejected as exc:
            raise InvalidRequest(
                str(exc), param=prompt.param, code="context_length_exceeded"
            ) from exc
        target.load.enqueue(request.request_id, priority, len(prompt.ids), time.monotonic())
        self.models.dispatched(target, len(prompt.ids))
        return PreparedGeneration(spec.name, target.served_by, fallback_from, target, request)

    def _route(self, spec: DeploymentSpec, build: PromptBuilder) -> tuple[_Prompt, Target, int]:
        """The version (the canary for its share), the prompt in its tokens, the engine
        (the long-prompt pool when the prompt is long; the worker the router picks) and
        the request's max_tokens, after every cap."""
        version = self.models.choose_version(spec)
        prompt = build(self.models.tokenizer(version))
        n = len(prompt.ids)
        if not n:
            raise InvalidRequest("the prompt is empty", param=prompt.param)
        pool = spec.long_prompt_pool
        long_pool = pool is not None and n >= pool.min_prompt_tokens
        target = self.models.target(version, long_pool, prompt.ids)
        context = target.engine.limits.context
        prompt_cap = context - 1
        if spec.max_prompt_tokens is not None and not long_pool:
            prompt_cap = min(prompt_cap, spec.max_prompt_tokens)
        if n > prompt_cap:
            where = (
                "this deployment's prompt limit"
                if prompt_cap < context - 1
                else ("this model's maximum context length")
            )
            raise InvalidRequest(
                f"The prompt has {n} tokens, over {where} of {prompt_cap} tokens. Shorten the "
                f"{prompt.param}.",
                param=prompt.param,
                code="context_length_exceeded",
            )
        room = context - n
        cap = room if spec.max_tokens is None else min(room, spec.max_tokens)
        if prompt.max_tokens is not None and prompt.max_tokens > cap:
            limit = (
                "this deployment's max_tokens limit"
                if cap < room
                else f"the {context}-token context window minus the prompt"
            )
            raise InvalidRequest(
                f"max_tokens is {prompt.max_tokens}, over {limit}: at most {cap} for this "
                f"{n}-token prompt (context window {context} tokens). Lower max_tokens.",
                param="max_tokens",
                code="context_length_exceeded",
            )
        return prompt, target, prompt.max_tokens if prompt.max_tokens is not None else cap

    async def events(self, prepared: PreparedGeneration) -> AsyncGenerator[EngineEvent, None]:
        """The engine's events for one request, each also recorded as metrics."""
        request = prepared.request
        tracker = self.recorder.track(prepared.deployment, request.clock.arrival_ts)
        target = prepared.target
        started = False
        try:
            async for event in prepared.engine.generate(request):
                if not started:
                    started = True
                    self._started(target, request)
                tracker.observe(event)
                yield event
        finally:
            if not started:
                self._started(target, request)
            self.models.ended(target)
            tracker.close()

    def _started(self, target: Target, request: GenerationRequest) -> None:
        target.load.started(request.request_id, time.monotonic())
        self.models.started(target, len(request.prompt_ids))


def _shed_error(spec: DeploymentSpec, admission: Admission) -> RateLimited:
    predicted = admission.predicted_ttft_s
    why = {
        "queue_full": "its queue is full",
        "slo_ttft": f"the predicted time to first token ({predicted or 0:.1f} s) would miss "
        f"its target ({spec.slo.ttft_p99_s:.1f} s)",
        "slo_tokens_per_s": f"streams would fall below {spec.slo.min_tokens_per_s:g} tokens/s",
    }[admission.reason.value]
    retry = admission.retry_after_s or 1
    return RateLimited(
        f"The deployment '{spec.name}' is overloaded: {why}. Retry in {retry} s.",
        code=f"overloaded_{admission.reason.value}",
        retry_after_s=retry,
    )


def _sampling(body: SamplingFields, version: VersionRef, max_tokens: int) -> SamplingParams:
    """The request's sampling, with the version's own defaults where the request is silent."""
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=_pick(body.temperature, version.param("temperature"), 1.0),
        top_k=max(0, _pick(body.top_k, version.param("top_k"), 0)),
        top_p=_pick(body.top_p, version.param("top_p"), 1.0),
        seed=body.seed,
        stop=body.stop_strings(),
        ignore_eos=body.ignore_eos,
        min_tokens=body.min_tokens,
    )


def _pick(requested: Any, version_default: Any, default: Any) -> Any:
    if requested is not None:
        return requested
    return default if version_default is None else version_default


def _check_supported(body: SamplingFields) -> None:
    problem = body.unsupported()
    if problem is not None:
        field, advice = problem
        raise InvalidRequest(
            f"'{field}' is not supported: {advice}", param=field, code="unsupported_parameter"
        )
