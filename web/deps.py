"""What the console's pages are handed, each by name (router dependencies): who is
looking (`viewer`, and `actor`, the name a write is audited under), the control plane,
the SLO tracker, the gateway's workers as they last reported, the sign-in throttle,
the overview's live numbers and the ring of kept traces. `console_dependencies` provides them all,
in one place, each read from the gateway's parts when a request asks for it; a page
names only what it uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeAlias

from litestar.di import NamedDependency, Provide

from vigil.platform.control.plane import ControlPlane
from vigil.platform.gateway.readiness import version_error, version_states
from vigil.platform.gateway.serving import ServingView
from vigil.platform.gateway.throttle import SignInThrottle
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.gateway.workers import WorkerRegistry
from vigil.platform.services import Services
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.telemetry.deployments import DeploymentSeries
from vigil.platform.telemetry.live import LiveSeries
from vigil.platform.telemetry.tracing import TraceRing
from vigil.web.auth import provide_actor, provide_viewer


@dataclass(frozen=True, slots=True)
class LiveNumbers:
    """The overview's reader of live telemetry: the gateway's newest point, each
    deployment's series, and each version's load state."""

    view: ServingView
    tokenizers: TokenizerCache
    live: LiveSeries
    series: DeploymentSeries

    @property
    def deployment_names(self) -> list[str]:
        return list(self.view.deployments)

    def stats(self) -> dict[str, Any]:
        """The stats fragment's context: the newest numbers, and per version its state."""
        view, tokenizers = self.view, self.tokenizers
        latest = {name: self.series.latest(name) for name in view.deployments}
        return {
            "point": self.live.latest(),
            "points": {name: asdict(p) if p else None for name, p in latest.items()},
            "models": [
                {"name": key, "state": state.value, "error": version_error(view, tokenizers, key)}
                for key, state in version_states(view, tokenizers).items()
            ],
        }

    def history(self) -> dict[str, list[dict[str, Any]]]:
        """Each deployment's points so far (the charts' first draw)."""
        return {
            name: [asdict(p) for p in self.series.points(name)] for name in self.view.deployments
        }


Plane: TypeAlias = NamedDependency[ControlPlane]
SLOs: TypeAlias = NamedDependency[SLOTracker]
Workers: TypeAlias = NamedDependency[WorkerRegistry]
SignIns: TypeAlias = NamedDependency[SignInThrottle]
Numbers: TypeAlias = NamedDependency[LiveNumbers]
Traces: TypeAlias = NamedDependency[TraceRing | None]  # None: tracing is off


def console_dependencies(services: Services) -> dict[str, Provide]:
    """Each read from `services` when a request asks for it, not captured here: a page is
    drawn from the parts the gateway holds at that moment."""

    def plane() -> ControlPlane:
        return services.plane

    def slos() -> SLOTracker:
        return services.slos

    def workers() -> WorkerRegistry:
        return services.workers

    def sign_ins() -> SignInThrottle:
        return services.sign_ins

    def traces() -> TraceRing | None:
        return services.tracing.ring if services.tracing is not None else None

    def numbers() -> LiveNumbers:
        return LiveNumbers(services.view, services.tokenizers, services.live, services.series)

    providers: dict[str, Callable[..., Any]] = {
        "viewer": provide_viewer,
        "actor": provide_actor,
        "plane": plane,
        "slos": slos,
        "workers": workers,
        "sign_ins": sign_ins,
        "numbers": numbers,
        "traces": traces,
    }
    return {name: Provide(p, sync_to_thread=False) for name, p in providers.items()}
