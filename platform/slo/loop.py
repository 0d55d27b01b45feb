"""The SLO loop: once a second, every deployment's SLO status turned into what Vigil does
about it, each step recorded as a decision with the numbers that caused it.

- Alerts: an SLI whose burn calls for a page or a ticket fires one (once per episode;
  its fingerprint names deployment, SLI and severity) and resolves it when the short
  window has cleared, which is what keeps it from flapping. A ticket firing when the
  burn grows into a page stays firing beside it (resolving it would only fire it again
  once the page is over). Its summary names the windows and the threshold it read.
- Actions, while a page-level burn goes on: batch traffic is shed first; if a page still
  burns `hold_s` later and the deployment has a fallback, new interactive requests go
  to it. The fallback is switched back once the deployment's own workers are forecast
  to meet RECOVERY_SHARE of its TTFT target under the interactive load offered to it
  now (planning/offered.py: every request asked of it, wherever it went), for
  `recovery_hold_s`: its own windows empty while the fallback takes its traffic, so
  they cannot tell, and switching back on them alone cycles under sustained load.
  Batch shedding ends `hold_s` after the fallback, once the burn has stopped. A page
  starts the actions; once they are on, the burn goes on as long as the fast page
  rule's long window (1 h of 30 days) is over its threshold. The short window is what
  resolves an alert fast, and under shedding it is often empty: that is no evidence the
  burn stopped.
- Canary: a canary whose bad share of some SLI is worse than its stable version's by
  more than the SLO's rollback_margin, once both have served rollback_min_requests in
  the window, is rolled back by `system`.
- Shadow: a shadow version is judged the same way; no client sees its answers, so a
  worse one is not rolled back but recorded, once, as a decision for its operator.
The deciders are pure functions of plain data; `SLOLoop` holds the clock and the writes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from vigil.platform.control.alerts.records import fingerprint
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.specs import DeploymentSpec
from vigil.platform.control.webhooks.records import WebhookEvent
from vigil.platform.slo.actions import (
    NO_ACTIONS,
    RECOVERY_SHARE,
    ActionBoard,
    Recovery,
    SLOActions,
)
from vigil.platform.slo.burn import Severity, scaled_rules
from vigil.platform.slo.sli import ALERTING, SERVED, SLI
from vigil.platform.slo.tracker import DeploymentSLO, SLIStatus, SLOTracker

log = logging.getLogger(__name__)

MIN_HOLD_S = 1.0
MAX_RECOVERY_HOLD_S = 60.0
# The actions that hold until switched off, each told to on-call as one alert.
CONDITIONS = {"shed_batch": WebhookEvent.SHED, "fallback": WebhookEvent.FALLBACK}


@dataclass(frozen=True, slots=True)
class ActionState:
    actions: SLOActions = NO_ACTIONS
    changed_ts: float = 0.0  # when the actions last changed
    recovered_since_ts: float | None = None  # the fallback's deployment could take it back


@dataclass(frozen=True, slots=True)
class Change:
    kind: str  # shed_batch | fallback
    on: bool


@dataclass(frozen=True, slots=True)
class Signals:
    paging: bool  # a page rule's two windows both burn now
    burning: bool  # paging, or while acting, the fast page rule's long window over it
    recovered: bool | None  # while falling back: Recovery.ok (None: no forecast to go by)


def plan_actions(
    state: ActionState,
    signals: Signals,
    has_fallback: bool,
    now_ts: float,
    hold_s: float,
    recovery_hold_s: float,
) -> tuple[ActionState, Change | None]:
    """At most one step at a time. Batch shedding goes on with the burn and off a hold
    after it stops; the fallback goes on when a page still burns a hold after the
    shedding began, and off once the forecast has said the deployment could take its
    load back for recovery_hold_s (or, with no forecast, the burn has stopped as long)."""
    a, held = state.actions, now_ts - state.changed_ts >= hold_s
    since = None
    if a.fallback:
        ok = signals.recovered if signals.recovered is not None else not signals.burning
        if ok:
            since = state.recovered_since_ts if state.recovered_since_ts is not None else now_ts
    change: Change | None = None
    if signals.burning and not a.shed_batch:
        change = Change("shed_batch", True)
    elif signals.paging and has_fallback and not a.fallback and held:
        change = Change("fallback", True)
    elif a.fallback and since is not None and now_ts - since >= recovery_hold_s:
        change = Change("fallback", False)
    elif not signals.burning and a.shed_batch and not a.fallback and held:
        change = Change("shed_batch", False)
    if change is None:
        return replace(state, recovered_since_ts=since), None
    actions = replace(a, **{change.kind: change.on})
    return ActionState(actions, now_ts), change


def hold_s(window_s: float) -> float:
    """The first page rule's long window (5 s for a 1-hour SLO, an hour for 30 days)."""
    return max(MIN_HOLD_S, scaled_rules(window_s)[0].long_s)


def recovery_hold_s(window_s: float) -> float:
    """How long a fallback's deployment must be forecast to cope before it takes its
    traffic back: a hold, up to MAX_RECOVERY_HOLD_S (the forecast is fresh evidence; an
    hour of it is not needed)."""
    return min(hold_s(window_s), MAX_RECOVERY_HOLD_S)


def paging(status: DeploymentSLO) -> list[SLIStatus]:
    return [s for sli, s in status.slis.items() if sli in ALERTING and s.severity is Severity.PAGE]


def burning_long(status: DeploymentSLO) -> list[SLIStatus]:
    """The SLIs whose burn over the fast page rule's long window is over its threshold."""
    fast = scaled_rules(status.slo.window_s)[0]

    def over(s: SLIStatus) -> bool:
        rate = s.burn_rates.get(fast.name)
        return rate is not None and rate > fast.rule.threshold

    return [s for sli, s in status.slis.items() if sli in ALERTING and over(s)]


@dataclass(frozen=True, slots=True)
class RollbackCase:
    sli: SLI
    canary_bad: float
    stable_bad: float
    canary_total: int
    stable_total: int


def canary_verdict(status: DeploymentSLO, stable: str, candidate: str) -> RollbackCase | None:
    """The first SLI on which the candidate (a canary or a shadow) is worse than stable by
    more than the margin, with enough requests on both to say so."""
    slo = status.slo
    for sli in SERVED:
        c = status.versions.get(candidate, {}).get(sli, (0, 0))
        s = status.versions.get(stable, {}).get(sli, (0, 0))
        if min(c[1], s[1]) < slo.rollback_min_requests:
            continue
        c_bad, s_bad = 1 - c[0] / c[1], 1 - s[0] / s[1]
        if c_bad - s_bad > slo.rollback_margin:
            return RollbackCase(sli, c_bad, s_bad, c[1], s[1])
    return None


def _rates(s: SLIStatus) -> dict[str, object]:
    return {
        "sli": s.sli.value,
        "good": s.good,
        "total": s.total,
        "budget_remaining": round(s.budget_remaining, 4),
        **{f"burn_{w}": round(r, 3) for w, r in s.burn_rates.items() if r is not None},
    }


class SLOLoop:
    def __init__(
        self,
        tracker: SLOTracker,
        board: ActionBoard,
        plane: ControlPlane,
        deployments: Callable[[], dict[str, DeploymentSpec]],
        serving: Callable[[DeploymentSpec], str],
        clock: Callable[[], float] = time.monotonic,
        recover: Callable[[DeploymentSpec], Awaitable[Recovery | None]] | None = None,
    ) -> None:
        """`deployments`: the serving view's; `serving`: the key of the stable version
        now serving a deployment (its canary is compared with that one); `recover`: how
        a deployment whose traffic goes to its fallback would do under it now."""
        self.tracker = tracker
        self.board = board
        self.plane = plane
        self._deployments = deployments
        self._serving = serving
        self._clock = clock
        self._recover = recover
        self.firing: dict[str, str] = {}  # fingerprint -> severity, of alerts firing now
        self._states: dict[str, ActionState] = {}
        self._shadows_judged: dict[str, str] = {}  # deployment -> shadow found worse

    async def start(self) -> None:
        """Pick up the alerts still firing from before a restart; and end the actions
        left on by a gateway that stopped or handed the loop on: they lived in its
        memory, so they are off now, and on-call must not keep seeing them on."""
        self.firing = {a.fingerprint: a.severity for a in await self.plane.alerts.firing()}
        for d in await self.plane.alerts.latest(list(CONDITIONS)):
            mine = self._states.get(d.deployment, ActionState()).actions
            if d.decision != "on" or getattr(mine, d.kind):
                continue
            reason = f"{d.deployment}: {d.kind} off, the SLO loop started afresh without it"
            await self.plane.alerts.decide(
                d.deployment, d.kind, "off", reason, {}, CONDITIONS[d.kind], False
            )

    def stand_down(self) -> None:
        """Another gateway runs the loop now: switch off what this one switched on, and
        forget its alerts (the new owner reads them from the database)."""
        for name in self._states:
            self.board.set(name, NO_ACTIONS)
        self._states.clear()
        self.firing = {}

    async def tick(self) -> None:
        now = self._clock()
        for name, spec in self._deployments().items():
            status = self.tracker.status(name)
            if status is not None:
                await self._alerts(status)
                await self._actions(spec, status, now)
                await self._canary(spec, status)
                await self._shadow(spec, status)

    async def _alerts(self, status: DeploymentSLO) -> None:
        name = status.deployment
        wanted = {
            fingerprint(name, sli.value, s.severity.value): s
            for sli, s in status.slis.items()
            if sli in ALERTING and s.severity is not None
        }
        for fp, s in wanted.items():
            if fp in self.firing:
                continue
            assert s.severity is not None and s.rule is not None
            summary = f"{name}: the {s.sli.value} SLO burns {s.severity.value}-fast: " + (
                s.rule.describe()
            )
            (long_window, _), (short_window, _) = s.rule.windows
            details = {
                **_rates(s),
                "long_window": long_window,
                "short_window": short_window,
                "threshold": s.rule.rule.threshold,
            }
            await self.plane.alerts.fire(name, s.sli.value, s.severity.value, summary, details)
            self.firing[fp] = s.severity.value
        for sli in ALERTING:
            paged = fingerprint(name, sli.value, Severity.PAGE.value) in wanted
            for severity in Severity:
                fp = fingerprint(name, sli.value, severity.value)
                if fp not in self.firing or fp in wanted:
                    continue
                if severity is Severity.TICKET and paged:
                    continue  # the burn got worse, not better: the ticket still stands
                await self.plane.alerts.resolve(fp, _rates(status.slis[sli]))
                del self.firing[fp]

    async def _actions(self, spec: DeploymentSpec, status: DeploymentSLO, now: float) -> None:
        state = self._states.get(spec.name, ActionState(changed_ts=now))
        acting = state.actions != NO_ACTIONS
        paged = paging(status)
        burning = paged or (burning_long(status) if acting else [])
        recovery = None
        if state.actions.fallback and self._recover is not None:
            recovery = await self._recover(spec)
        signals = Signals(bool(paged), bool(burning), recovery.ok if recovery else None)
        window_s = status.slo.window_s
        new, change = plan_actions(
            state,
            signals,
            spec.fallback is not None,
            now,
            hold_s(window_s),
            recovery_hold_s(window_s),
        )
        self._states[spec.name] = new
        if change is None:
            return
        self.board.set(spec.name, new.actions)
        what = {
            "shed_batch": "batch traffic shed",
            "fallback": "interactive traffic to "
            f"{spec.fallback.deployment if spec.fallback else ''}",
        }[change.kind]
        details: dict[str, object] = {
            s.sli.value: _rates(s) for s in (burning or status.slis.values()) if s.sli in ALERTING
        }
        if change.on:
            slis = ", ".join(s.sli.value for s in burning)
            reason = f"{spec.name}: {what}, while the {slis} SLO burns its budget page-fast"
        elif change.kind == "fallback" and recovery is not None:
            reason = (
                f"{spec.name}: {what} no more: at the {recovery.offered_rps:.3g} interactive "
                f"requests/s offered, its own workers are forecast a TTFT p99 of "
                f"{recovery.ttft_p99_s:.3g} s, within {RECOVERY_SHARE:.0%} of its "
                f"{recovery.target_s:g} s target, for {recovery_hold_s(window_s):g} s"
            )
            details["forecast"] = {
                "ttft_p99_s": round(recovery.ttft_p99_s, 4),
                "offered_rps": round(recovery.offered_rps, 3),
                "target_s": recovery.target_s,
                "recovery_share": RECOVERY_SHARE,
            }
        else:
            reason = f"{spec.name}: {what} no more, the burn has stopped"
        await self.plane.alerts.decide(
            spec.name,
            change.kind,
            "on" if change.on else "off",
            reason,
            details,
            CONDITIONS[change.kind],
            ongoing=change.on,
        )
        log.warning("%s", reason)

    async def _canary(self, spec: DeploymentSpec, status: DeploymentSLO) -> None:
        canary = spec.canary
        if canary is None or spec.canary_weight <= 0 or not status.slo.auto_rollback:
            return
        case = canary_verdict(status, self._serving(spec), canary.key)
        if case is None:
            return
        reason = (
            f"{spec.name}: canary {canary.key} rolled back: {case.canary_bad:.1%} of its "
            f"requests missed the {case.sli.value} SLO against {case.stable_bad:.1%} on "
            f"stable (margin {status.slo.rollback_margin:.1%})"
        )
        details = {
            "sli": case.sli.value,
            "canary": canary.key,
            "canary_bad": round(case.canary_bad, 4),
            "canary_requests": case.canary_total,
            "stable_bad": round(case.stable_bad, 4),
            "stable_requests": case.stable_total,
            "margin": status.slo.rollback_margin,
        }
        await self.plane.deployments.drop_canary(spec.name, actor="system", reason=reason)
        await self.plane.alerts.decide(
            spec.name, "rollback", "rolled_back", reason, details, WebhookEvent.CANARY_ROLLBACK
        )
        log.warning("%s", reason)

    async def _shadow(self, spec: DeploymentSpec, status: DeploymentSLO) -> None:
        shadow = spec.shadow
        if shadow is None or self._shadows_judged.get(spec.name) == shadow.key:
            return
        case = canary_verdict(status, self._serving(spec), shadow.key)
        if case is None:
            return
        self._shadows_judged[spec.name] = shadow.key
        reason = (
            f"{spec.name}: shadow {shadow.key} is worse than stable: {case.canary_bad:.1%} of "
            f"its mirrored requests missed the {case.sli.value} SLO against "
            f"{case.stable_bad:.1%} on stable (margin {status.slo.rollback_margin:.1%}); "
            "it would be rolled back as a canary"
        )
        details = {
            "sli": case.sli.value,
            "shadow": shadow.key,
            "shadow_bad": round(case.canary_bad, 4),
            "shadow_requests": case.canary_total,
            "stable_bad": round(case.stable_bad, 4),
            "stable_requests": case.stable_total,
            "margin": status.slo.rollback_margin,
        }
        await self.plane.alerts.decide(spec.name, "shadow", "worse", reason, details)
        log.warning("%s", reason)
