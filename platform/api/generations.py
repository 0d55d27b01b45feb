"""A generation at the API edge: the request described in its log fields and trace
(GenAI conventions), started by the gateway, and what the gateway decided (deployment,
version, replica, admission, fallback) noted from what `start()` returned, once."""

from __future__ import annotations

from vigil.platform.gateway.auth import Principal
from vigil.platform.gateway.generation import Generation, Routed, Shed
from vigil.platform.gateway.params import ChatPrompt, GenerationParams
from vigil.platform.gateway.pipeline import GenerationService
from vigil.platform.telemetry.context import RequestContext, current


async def start_generation(
    service: GenerationService, params: GenerationParams, principal: Principal, arrival_ts: float
) -> Generation:
    context = current()
    if context is not None:
        _describe(context, params, principal)
    try:
        generation = await service.start(params, principal, arrival_ts, context)
    except Shed as exc:
        if context is not None:
            _routed(context, exc.routed)
        raise
    if context is not None:
        _routed(context, generation.routed)
    return generation


def _describe(context: RequestContext, params: GenerationParams, principal: Principal) -> None:
    """What the request asks."""
    priority = principal.priority
    context.request_id = params.request_id
    context.note(priority=priority.label)
    if context.trace is not None:
        operation = "chat" if isinstance(params.prompt, ChatPrompt) else "text_completion"
        context.trace.server.update_name(f"{operation} {params.model}")
        context.trace.set(
            **{
                "gen_ai.operation.name": operation,
                "gen_ai.request.model": params.model,
                "gen_ai.request.max_tokens": params.max_tokens,
                "gen_ai.request.temperature": params.temperature,
                "gen_ai.request.seed": params.seed,
                "gen_ai.request.choice.count": params.n if params.n != 1 else None,
                "gen_ai.output.type": "json" if params.response_format is not None else None,
                "vigil.tools": len(params.tools) if params.offers_tools else None,
                "vigil.tool_choice": params.tool_choice.mode.value if params.offers_tools else None,
                "vigil.logprobs": params.logprobs,
                "vigil.priority": priority.label,
                "vigil.request_id": params.request_id,
            }
        )


def _routed(context: RequestContext, routed: Routed) -> None:
    """Where it went: its grammar's compile, each admission decision (two after a
    fallback), then where it runs."""
    grammar = routed.grammar
    if grammar is not None and context.trace is not None:
        kind = grammar.kind.value
        context.trace.grammar(kind, grammar.cached, grammar.start_ts, grammar.end_ts)
    for decided in routed.decisions:
        admission = decided.admission
        verdict, reason = admission.verdict.value, admission.reason.value
        context.note(admission=verdict, reason=reason)
        if context.trace is not None:
            context.trace.admission(
                decided.deployment,
                decided.version,
                verdict,
                reason,
                admission.predicted_ttft_s,
                context.start_ts,
                decided.decided_ts,
            )
    context.ttft_target_s = routed.ttft_target_s
    fallback_from = routed.route.fallback_from
    context.note(deployment=routed.deployment, version=routed.version, fallback_from=fallback_from)
    if context.trace is not None:
        context.trace.set(
            **{
                "gen_ai.response.model": routed.version,
                "vigil.deployment": routed.deployment,
                "vigil.version": routed.version,
                "vigil.replica": routed.replica,
                "vigil.fallback_from": fallback_from,
            }
        )
