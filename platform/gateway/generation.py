"""From a generation asked of a deployment to an admitted request on one worker's
engine, and its events back.

    params -> deployment (404; 403 when the key may not use it) -> version (canary split)
      -> prompt ids (that version's tokenizer and chat template)
      -> engine: the version's own, or its long-prompt pool's for a long prompt
      -> replica (router: load and prefix affinity)
      -> context rule with the deployment's caps (400 context_length_exceeded)
      -> admission: admit | fall back (all of the above again on the fallback
         deployment, once) | shed (429 + Retry-After)
      -> a lease opened on the replica, the request sent there (another replica if it
         cannot be reached) -> Generation: the engine's events, each seen by the
         lease, which is closed however the request ends
      -> for shadow_weight of the requests the deployment serves itself, a mirrored
         copy to its shadow version (shadow.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from vigil.engine.limits import ContextLimit, RequestRejected, fit_request
from vigil.engine.request import (
    EngineEvent,
    FinishEvent,
    FinishReason,
    GenerationRequest,
    Priority,
    RequestClock,
    RequestId,
)
from vigil.engine.tokenizer import TooManyTokens
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.errors import (
    EngineFailed,
    InvalidRequest,
    PermissionDenied,
    QueueTimeout,
    ServiceUnavailable,
    VigilError,
)
from vigil.platform.gateway.admission import Admission, LoadSnapshot, Verdict, decide, shed_error
from vigil.platform.gateway.auth import Principal
from vigil.platform.gateway.lease import Lease, LoadBook, ReplicaCounts
from vigil.platform.gateway.link import Events, WorkerLink, WorkerUnreachable
from vigil.platform.gateway.params import (
    ChatPrompt,
    GenerationParams,
    check_prompt_size,
    prompt_ids,
    sampling,
)
from vigil.platform.gateway.prefixes import PrefixMemory, block_hashes
from vigil.platform.gateway.router import ReplicaLoad, Router, prefix_key
from vigil.platform.gateway.serving import ServingView, engine_key
from vigil.platform.gateway.shadow import PRIORITY as SHADOW_PRIORITY
from vigil.platform.gateway.shadow import Dropped, ShadowMirror
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.gateway.workers import Replica
from vigil.platform.planning.offered import OfferedLoad
from vigil.platform.slo.actions import ActionBoard
from vigil.platform.telemetry.context import current
from vigil.platform.worker.protocol import stats_of

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Route:
    """How a request got to the deployment that serves it."""

    fallback_from: str | None = None  # the deployment asked for, after a fallback
    skipped: str | None = None  # a fallback that was called for and not taken, and why


@dataclass(frozen=True, slots=True)
class _Placement:
    """Where one request would run, and the load there: what admission decides on."""

    spec: DeploymentSpec
    version: VersionRef
    key: str  # the engine slot
    replica: Replica
    prompt_ids: list[int]
    max_tokens: int
    load: LoadSnapshot
    block_hashes: list[int]  # of the prompt's full blocks, as that engine caches them
    num_cached_tokens: int  # of the prompt, likely in that engine's prefix cache
    capacity_blocks: int  # KV blocks of that engine


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
        self.router = router
        self.loads = loads
        self.link = link
        self.max_prompt_chars = max_prompt_chars
        self.actions = actions
        self.shadows = shadows
        self.offered = OfferedLoad()  # what each deployment is asked, for the SLO loop
        self.prefixes = PrefixMemory()  # what each engine likely holds in its prefix cache

    async def start(
        self, params: GenerationParams, principal: Principal, arrival_ts: float
    ) -> Generation:
        """The request admitted and taken by a worker, or the error that says why not."""
        spec = self.view.deployment(params.model)
        if not principal.may_use(spec.name):
            raise PermissionDenied(
                f"This API key may not use the model '{params.model}'.",
                param="model",
                code="model_not_allowed",
            )
        check_prompt_size(params.prompt, self.max_prompt_chars, params.prompt_param)
        priority = principal.priority
        _describe(params, priority)
        place, admission, route = await self._admit(spec, params, priority)
        _served_as(place, route)
        if admission.verdict is Verdict.SHED:
            log.info(
                "shed %s on %s: %s", params.request_id, place.spec.name, admission.reason.value
            )
            raise shed_error(place.spec, admission)
        if params.min_tokens > place.max_tokens:
            raise InvalidRequest(
                f"min_tokens ({params.min_tokens}) is over the {place.max_tokens} tokens this "
                "request may generate; lower min_tokens.",
                param="min_tokens",
            )
        clock = RequestClock(arrival_ts)
        request = GenerationRequest(
            request_id=params.request_id,
            prompt_ids=place.prompt_ids,
            params=sampling(params, place.version, place.max_tokens),
            priority=priority,
            clock=clock,
            deadline_ts=arrival_ts + place.spec.limits[priority].max_queue_wait_s,
        )
        lease, events = await self._dispatch(place, request, admission.predicted_ttft_s)
        if place.spec is spec and self.view.split.to_shadow(spec):
            self.shadows.mirror(spec, params, self._shadow)
        served_by = f"{place.version.model}/{place.version.version}"
        return Generation(lease, request, events, served_by, route)

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
        request = GenerationRequest(
            request_id=params.request_id,
            prompt_ids=place.prompt_ids,
            params=sampling(params, place.version, place.max_tokens),
            priority=SHADOW_PRIORITY,
            clock=RequestClock(arrival_ts),
            deadline_ts=arrival_ts + spec.limits[SHADOW_PRIORITY].max_queue_wait_s,
        )
        lease, events = await self._dispatch(place, request, None, shadow=True)
        served_by = f"{place.version.model}/{place.version.version}"
        await Generation(lease, request, events, served_by, Route()).collect()

    async def _admit(
        self, spec: DeploymentSpec, params: GenerationParams, priority: Priority
    ) -> tuple[_Placement, Admission, Route]:
        """Placed and decided on the deployment; on a fallback verdict, on the fallback
        deployment instead, when it is ready and the request fits its limits (else the
        request stays, and the response says why)."""
        place = await self._place(spec, params)
        if priority is Priority.INTERACTIVE:
            expected = self.loads.expected_output(place.key, place.max_tokens)
            self.offered.add(spec.name, len(place.prompt_ids), expected)
        actions = self.actions.get(spec.name)
        admission = decide(
            priority,
            len(place.prompt_ids),
            place.load,
            spec,
            actions=actions,
            cached_tokens=place.num_cached_tokens,
        )
        route = Route()
        if admission.verdict is Verdict.FALLBACK:
            assert spec.fallback is not None
            self._record(place, admission, priority)
            fallback = self.view.deployment(spec.fallback.deployment)
            log.info(
                "fallback %s from %s to %s: %s",
                params.request_id,
                spec.name,
                fallback.name,
                admission.reason.value,
            )
            if not self.view.is_ready(fallback):  # a fallback still loading is no help
                route = Route(skipped=f"{fallback.name}: not ready")
            else:
                try:
                    place, route = await self._place(fallback, params), Route(spec.name)
                except InvalidRequest as exc:
                    route = Route(skipped=f"{fallback.name}: {exc.code or 'does not fit'}")
            admission = decide(
                priority,
                len(place.prompt_ids),
                place.load,
                place.spec,
                allow_fallback=False,
                cached_tokens=place.num_cached_tokens,
            )
        self._record(place, admission, priority)
        return place, admission, route

    async def _dispatch(
        self,
        place: _Placement,
        request: GenerationRequest,
        predicted_ttft_s: float | None,
        shadow: bool = False,
    ) -> tuple[Lease, Events]:
        """Send the request to the chosen replica; one that cannot be reached becomes a
        suspect and the next choice among the engine's other replicas gets it."""
        replica = place.replica
        context = current() if not shadow else None
        trace = context.trace if context is not None else None
        while True:
            headers = trace.worker_headers(replica.id, time.monotonic()) if trace else None
            lease = self.loads.open(
                request.request_id,
                place.spec.name,
                place.version.key,
                place.key,
                replica.id,
                request.priority,
                len(request.prompt_ids),
                request.params.max_tokens,
                request.clock,
                predicted_ttft_s,
                shadow,
                context,
                place.num_cached_tokens,
            )
            self.prefixes.remember(place.key, replica.id, place.block_hashes, place.capacity_blocks)
            try:
                return lease, await self.link.open(replica, place.key, request, headers)
            except WorkerUnreachable:
                lease.discard()
            except BaseException:
                lease.discard()
                raise
            replicas = self.view.workers.serving(place.key)
            if not replicas:
                raise ServiceUnavailable(
                    f"No live worker could take the request for '{place.key}'; retry shortly.",
                    code="worker_unavailable",
                    retry_after_s=1,
                )
            replica = self._choose(place.key, replicas, request.prompt_ids)

    def _choose(self, key: str, replicas: list[Replica], ids: list[int]) -> Replica:
        counts = self.loads.replica_counts(key)
        loads = [replica_load(r, key, counts.get(r.id, ReplicaCounts())) for r in replicas]
        chosen = self.router.choose(key, loads, prefix_key(ids))
        return next(r for r in replicas if r.id == chosen.replica)

    async def _place(
        self, spec: DeploymentSpec, params: GenerationParams, version: VersionRef | None = None
    ) -> _Placement:
        """On `version`, or the one the canary split picks."""
        version = version or self.view.choose_version(spec)
        tokenizer = self.tokenizers.require(version)
        # The longest context any engine of this version offers bounds the prompt.
        ceiling = max(
            (
                min(r.limits.max_model_len, r.limits.kv_capacity_tokens)
                for key in (engine_key(version), engine_key(version, long_pool=True))
                for replica in self.view.workers.serving(key)
                if (r := replica.slots[key]).limits is not None
            ),
            default=None,
        )
        # Off the event loop: a long prompt takes seconds to tokenize, and every other
        # request, stream and probe of this gateway would wait for it.
        try:
            ids = await asyncio.to_thread(
                prompt_ids, params.prompt, tokenizer, params.prompt_param, ceiling
            )
        except TooManyTokens as exc:
            assert ceiling is not None
            _fit(exc.num_tokens, params, ContextLimit(ceiling))  # raises: over the ceiling
            raise AssertionError("a prompt over every context passed the context rule") from exc
        pool = spec.long_prompt_pool
        long_pool = pool is not None and len(ids) >= pool.min_prompt_tokens
        key = engine_key(version, long_pool)
        replicas = self.view.workers.serving(key)
        if not replicas:
            raise self.view.workers.unavailable(key)
        replica = self._choose(key, replicas, ids)
        limits = replica.slots[key].limits
        assert limits is not None, f"{key} is ready on {replica.id} without limits"
        deployment_caps = ContextLimit(
            min(limits.max_model_len, limits.kv_capacity_tokens),
            max_prompt_tokens=None if long_pool else spec.max_prompt_tokens,
            max_output_tokens=spec.max_tokens,
        )
        max_tokens = _fit(len(ids), params, deployment_caps)
        default_cap = version.param("max_tokens")
        if params.max_tokens is None and default_cap is not None:  # the request set none
            max_tokens = min(max_tokens, default_cap)
        report = replica.slots[key]
        costs = report.costs.costs() if report.costs is not None else None
        engine_limits = (limits.max_num_seqs, limits.max_num_batched_tokens)
        load = self.loads.snapshot(key, replica.id, engine_limits, costs)
        hashes, cached, capacity = [], 0, 0
        if limits.prefix_caching and limits.block_size:
            hashes = block_hashes(ids, limits.block_size)
            cached = self.prefixes.cached_tokens(
                key, replica.id, hashes, limits.block_size, len(ids)
            )
            capacity = limits.kv_capacity_tokens // limits.block_size
        return _Placement(
            spec, version, key, replica, ids, max_tokens, load, hashes, cached, capacity
        )

    def _record(self, place: _Placement, admission: Admission, priority: Priority) -> None:
        verdict, reason = admission.verdict.value, admission.reason.value
        self.loads.recorder.admission(place.spec.name, place.version.key, verdict, reason, priority)
        context = current()
        if context is None:
            return
        context.note(admission=verdict, reason=reason)
        if context.trace is not None:
            context.trace.admission(
                place.spec.name,
                place.version.key,
                verdict,
                reason,
                admission.predicted_ttft_s,
                context.start_ts,
            )


def _describe(params: GenerationParams, priority: Priority) -> None:
    """What the request asks, in its log context and trace (GenAI conventions)."""
    context = current()
    if context is None:
        return
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
                "vigil.priority": priority.label,
                "vigil.request_id": params.request_id,
            }
        )


def _served_as(place: _Placement, route: Route) -> None:
    context = current()
    if context is None:
        return
    context.ttft_target_s = place.spec.slo.ttft_p99_s
    context.note(
        deployment=place.spec.name, version=place.version.key, fallback_from=route.fallback_from
    )
    if context.trace is not None:
        context.trace.set(
            **{
                "gen_ai.response.model": place.version.key,
                "vigil.deployment": place.spec.name,
                "vigil.version": place.version.key,
                "vigil.replica": place.replica.id,
                "vigil.fallback_from": route.fallback_from,
            }
        )


def _fit(num_prompt_tokens: int, params: GenerationParams, limit: ContextLimit) -> int:
    """The context rule (engine/limits.py), its refusal naming the request's own field."""
    try:
        return fit_request(num_prompt_tokens, params.max_tokens, limit)
    except RequestRejected as exc:
        param = params.prompt_param if exc.param == "prompt" else exc.param
        raise InvalidRequest(str(exc), param=param, code="context_length_exceeded") from None


def replica_load(replica: Replica, key: str, counts: ReplicaCounts) -> ReplicaLoad:
    """What the router weighs for one replica: the gateway's own counts of what it sent
    there, and what the replica last reported."""
    report = replica.slots[key]
    assert report.limits is not None
    stats = stats_of(report.stats) if report.stats else None
    pending = counts.num_pending_prompt_tokens
    per_token_s = report.costs.token_s if report.costs is not None else None
    return ReplicaLoad(
        replica.id,
        counts.num_in_flight,
        report.limits.max_num_seqs,
        stats.kv_cache_usage if stats else 0.0,
        pending,
        pending * per_token_s if per_token_s is not None else None,
    )


class Generation:
    """An admitted request: who serves it, and its events. Read `events()` once; leaving
    it early (the client went away) aborts the request. Its lease closes however it
    ends, even if the events are never read."""

    def __init__(
        self,
        lease: Lease,
        request: GenerationRequest,
        events: Events,
        served_by: str,
        route: Route,
    ) -> None:
        self.lease = lease
        self.request = request
        self.served_by = served_by  # model/version
        self.route = route
        self._events = events
        weakref.finalize(self, lease.close)

    @property
    def request_id(self) -> RequestId:
        return self.request.request_id

    @property
    def deployment(self) -> str:
        return self.lease.deployment

    @property
    def replica(self) -> str:
        return self.lease.replica

    async def events(self) -> AsyncGenerator[EngineEvent, None]:
        try:
            async for event in self._events:
                self.lease.observe(event)
                yield event
        finally:
            await self._events.aclose()
            self.lease.close()

    async def collect(self) -> tuple[str, FinishEvent]:
        """The whole answer, or the error it ended with."""
        parts: list[str] = []
        # Closed on the way out, not whenever it is collected: until then its lease
        # would count the request as in flight, in admission's and routing's eyes.
        async with contextlib.aclosing(self.events()) as events:
            async for event in events:
                parts.append(event.text)
                if isinstance(event, FinishEvent):
                    error = finish_error(event)
                    if error is not None:
                        raise error
                    return "".join(parts), event
        raise AssertionError("the engine's event stream ended without a FinishEvent")


def finish_error(event: FinishEvent) -> VigilError | None:
    """The error a request that ended this way answers with; None for a normal end."""
    if event.reason in (FinishReason.STOP, FinishReason.LENGTH):
        return None
    if event.reason is FinishReason.TIMEOUT:
        clock = event.clock
        waited_s = (clock.finished_ts or clock.arrival_ts) - clock.arrival_ts
        return QueueTimeout(
            f"The request waited {waited_s:.1f} s in the queue without starting and was "
            "dropped; the server is overloaded, retry later.",
            code="queue_timeout",
            retry_after_s=1,
        )
    return EngineFailed(event.error or "the engine stopped the request", code="engine_error")
