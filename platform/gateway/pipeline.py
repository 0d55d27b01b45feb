"""From a generation asked of a deployment to an admitted request on one worker's
engine, one step a module:

    resolve    the deployment (404; 403 when the key may not use it)
    prompt     size check; on the version the canary split picks, the grammar its
               output must follow compiled (grammars.py), and its tokenizer and chat
               template (with the tools offered), once, off the event loop (prompt.py)
    place      the engine (long-prompt pool or not) and the replica (placement.py); the
               request fitted to that engine's context and the deployment's caps, once
    admit      admission.decide: admit | fall back (prompt and place again on the
               fallback deployment, once) | shed (429 + Retry-After)
    dispatch   a lease opened on the replica and the request sent (dispatch.py)

and, for shadow_weight of the requests the deployment serves itself, a mirrored copy to
its shadow version (shadow.py). What was decided comes back in the `Generation`
(`Routed`), for the API edge to note in the request's log fields and trace.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from vigil.engine.request import GenerationRequest, Priority, RequestClock
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.errors import InvalidRequest, PermissionDenied
from vigil.platform.gateway.admission import Verdict, decide, shed_error
from vigil.platform.gateway.auth import Principal
from vigil.platform.gateway.dispatch import Dispatcher
from vigil.platform.gateway.generation import Decided, Generation, Route, Routed, Shed
from vigil.platform.gateway.grammars import GrammarChecks
from vigil.platform.gateway.lease import Lease, LoadBook
from vigil.platform.gateway.link import Events, WorkerLink
from vigil.platform.gateway.params import GenerationParams
from vigil.platform.gateway.placement import (
    Placement,
    Placer,
    context_ceiling,
    engine_for,
    limits_of,
)
from vigil.platform.gateway.prompt import (
    check_min_tokens,
    check_prompt_size,
    fit_to,
    sampling,
    tokenize,
)
from vigil.platform.gateway.router import Router
from vigil.platform.gateway.serving import ServingView, engine_key
from vigil.platform.gateway.shadow import PRIORITY as SHADOW_PRIORITY
from vigil.platform.gateway.shadow import Dropped, ShadowMirror
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.planning.offered import OfferedLoad
from vigil.platform.slo.actions import NO_ACTIONS, ActionBoard
from vigil.platform.telemetry.context import RequestContext

log = logging.getLogger(__name__)


class GenerationService:
    def __init__(
        self,
        view: ServingView,
        tokenizers: TokenizerCache,
        router: Router,
        loads: LoadBook,
        link: WorkerLink,
        max_prompt_chars: int,
        actions: ActionBoard,
        shadows: ShadowMirror,
    ) -> None:
        self.view = view
        self.tokenizers = tokenizers
        self.loads = loads
        self.max_prompt_chars = max_prompt_chars
        self.actions = actions
        self.shadows = shadows
        self.placer = Placer(view.workers, router, loads)
        self.grammars = GrammarChecks()
        self.dispatcher = Dispatcher(loads, link, self.placer)
        self.offered = OfferedLoad()  # what each deployment is asked, for the SLO loop

    async def start(
        self,
        params: GenerationParams,
        principal: Principal,
        arrival_ts: float,
        context: RequestContext | None = None,
    ) -> Generation:
        """The request admitted and taken by a worker, or the error that says why not
        (`Shed` for a request admission turned away). `context`: the API request's, which
        the request's trace and lease carry."""
        spec = self._resolve(params.model, principal)
        check_prompt_size(params.prompt, self.max_prompt_chars, params.prompt_param)
        priority = principal.priority
        place, decisions, route = await self._admit(spec, params, priority)
        admission = decisions[-1].admission
        routed = _routed(place, route, decisions)
        if admission.verdict is Verdict.SHED:
            log.info(
                "shed %s on %s: %s", params.request_id, place.spec.name, admission.reason.value
            )
            raise Shed(shed_error(place.spec, admission), routed)
        check_min_tokens(params, place.max_tokens)
        request = _request(params, place, priority, arrival_ts)
        send = self.dispatcher.send
        lease, events = await send(place, request, admission.predicted_ttft_s, context)
        if place.spec is spec and self.view.split.to_shadow(spec):
            self.shadows.mirror(spec, params, self._shadow)
        routed = dataclasses.replace(routed, replica=lease.replica)  # after any retry
        return self._generation(place, params, lease, request, events, routed)

    def _generation(
        self,
        place: Placement,
        params: GenerationParams,
        lease: Lease,
        request: GenerationRequest,
        events: Events,
        routed: Routed,
    ) -> Generation:
        assert place.output is not None
        tools = place.output.tool_format if params.offers_tools else None
        tokenizer = self.tokenizers.require(place.version)
        served_by = _served_by(place.version)
        return Generation(lease, request, events, served_by, routed, tokenizer, tools)

    def _resolve(self, model: str, principal: Principal) -> DeploymentSpec:
        """The deployment asked for: 404 when there is none, 403 when the key may not
        use it."""
        spec = self.view.deployment(model)
        if not principal.may_use(spec.name):
            raise PermissionDenied(
                f"This API key may not use the model '{model}'.",
                param="model",
                code="model_not_allowed",
            )
        return spec

    async def _shadow(self, spec: DeploymentSpec, params: GenerationParams) -> None:
        """A mirrored copy of a request on the deployment's shadow version, read to its
        end and thrown away; dropped when that version is not ready or its engine has
        requests waiting (a mirror must never delay a client's request)."""
        assert spec.shadow is not None
        arrival_ts = time.monotonic()
        if not self.view.workers.serving(engine_key(spec.shadow)):
            self.shadows.dropped(spec, Dropped.NOT_READY)
            return
        place = await self._place(spec, params, spec.shadow)
        if any(place.load.queued.values()):
            self.shadows.dropped(spec, Dropped.BUSY)
            return
        request = _request(params, place, SHADOW_PRIORITY, arrival_ts)
        lease, events = await self.dispatcher.send(place, request, None, None, shadow=True)
        routed = Routed(spec.name, place.version.key, lease.replica, 0.0, Route(), ())
        await self._generation(place, params, lease, request, events, routed).collect()

    async def _admit(
        self, spec: DeploymentSpec, params: GenerationParams, priority: Priority
    ) -> tuple[Placement, tuple[Decided, ...], Route]:
        """Placed and decided on the deployment; on a fallback verdict, on the fallback
        deployment instead, when it is ready and the request fits its limits (else the
        request stays, and the response says why)."""
        place = await self._place(spec, params)
        if priority is Priority.INTERACTIVE:
            expected = self.loads.expected_output(place.key, place.max_tokens)
            self.offered.add(spec.name, len(place.prompt_ids), expected)
        first = self._decide(place, priority, params.n, allow_fallback=True)
        if first.admission.verdict is not Verdict.FALLBACK:
            return place, (first,), Route()
        assert spec.fallback is not None
        fallback = self.view.deployment(spec.fallback.deployment)
        log.info(
            "fallback %s from %s to %s: %s",
            params.request_id,
            spec.name,
            fallback.name,
            first.admission.reason.value,
        )
        if not self.view.is_ready(fallback):  # a fallback still loading is no help
            route = Route(skipped=f"{fallback.name}: not ready")
        else:
            try:
                place, route = await self._place(fallback, params), Route(spec.name)
            except InvalidRequest as exc:
                route = Route(skipped=f"{fallback.name}: {exc.code or 'does not fit'}")
        second = self._decide(place, priority, params.n, allow_fallback=False)
        return place, (first, second), route

    def _decide(
        self, place: Placement, priority: Priority, num_seqs: int, allow_fallback: bool
    ) -> Decided:
        spec = place.spec
        admission = decide(
            priority,
            len(place.prompt_ids),
            place.load,
            spec,
            allow_fallback=allow_fallback,
            actions=self.actions.get(spec.name) if allow_fallback else NO_ACTIONS,
            cached_tokens=place.num_cached_tokens,
            num_seqs=num_seqs,
        )
        verdict, reason = admission.verdict.value, admission.reason.value
        self.loads.recorder.admission(spec.name, place.version.key, verdict, reason, priority)
        return Decided(spec.name, place.version.key, admission, time.monotonic())

    async def _place(
        self, spec: DeploymentSpec, params: GenerationParams, version: VersionRef | None = None
    ) -> Placement:
        """On `version`, or the one the canary split picks: the prompt tokenized with its
        tokenizer, the engine and replica chosen, the request fitted to that engine."""
        version = version or self.view.choose_version(spec)
        tokenizer = self.tokenizers.require(version)
        output = await self.grammars.plan(params, version, tokenizer)
        ceiling = context_ceiling(self.view.workers, version)
        ids = await tokenize(params, tokenizer, ceiling, output.tool_format)
        key, long_pool = engine_for(spec, version, len(ids))
        replica = self.placer.choose(key, self.placer.serving(key), ids)
        max_tokens = fit_to(len(ids), params, spec, version, limits_of(replica, key), long_pool)
        place = self.placer.placement(spec, version, key, replica, ids, max_tokens)
        return dataclasses.replace(place, output=output)


def _request(
    params: GenerationParams, place: Placement, priority: Priority, arrival_ts: float
) -> GenerationRequest:
    constraint = place.output.constraint if place.output is not None else None
    return GenerationRequest(
        request_id=params.request_id,
        prompt_ids=place.prompt_ids,
        params=sampling(params, place.version, place.max_tokens, constraint),
        priority=priority,
        clock=RequestClock(arrival_ts),
        deadline_ts=arrival_ts + place.spec.limits[priority].max_queue_wait_s,
    )


def _routed(place: Placement, route: Route, decisions: tuple[Decided, ...]) -> Routed:
    spec = place.spec
    grammar = place.output.grammar if place.output is not None else None
    return Routed(
        spec.name,
        place.version.key,
        place.replica.id,
        spec.slo.ttft_p99_s,
        route,
        decisions,
        grammar,
    )


def _served_by(version: VersionRef) -> str:
    return f"{version.model}/{version.version}"
