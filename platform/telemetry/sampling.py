"""A point of the live numbers, once a second (platform/loops.py): the gateway's own
(the overview's header) and each deployment's (its charts: its engines' queues and KV
use, its SLO target, and what the SLO loop has switched on for it).

The sampler reads plain records through the callables it is given (the engines' latest
stats as the workers reported them, the deployments served, the SLO actions on), never
the gateway's objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from vigil.platform.control.specs import DeploymentSpec
from vigil.platform.slo.actions import SLOActions
from vigil.platform.telemetry.deployments import DeploymentSeries, EngineGauges
from vigil.platform.telemetry.live import Gauges, LiveSeries
from vigil.platform.telemetry.metrics import EngineSnapshot


def live_gauges(snaps: Sequence[EngineSnapshot]) -> Gauges:
    """Every engine's queue and batch, and the fullest one's KV cache."""
    return Gauges(
        num_waiting=sum(s.stats.num_waiting for s in snaps),
        num_running=sum(s.stats.num_running for s in snaps),
        kv_cache_usage=max((s.stats.kv_cache_usage for s in snaps), default=0.0),
    )


def deployment_gauges(spec: DeploymentSpec, snaps: Sequence[EngineSnapshot]) -> EngineGauges:
    """The engines of the deployment's versions on every worker, long-prompt pools
    included, read together."""
    return version_gauges({v.key for v in spec.versions}, snaps)


def roles(spec: DeploymentSpec) -> dict[str, str]:
    """The role each of the deployment's versions plays (deployments.py ROLES)."""
    found = {"stable": spec.stable, "canary": spec.canary, "shadow": spec.shadow}
    return {role: v.key for role, v in found.items() if v is not None}


def version_gauges(keys: set[str], snaps: Sequence[EngineSnapshot]) -> EngineGauges:
    mine = [s.stats for s in snaps if s.version in keys]
    return EngineGauges(
        num_waiting_interactive=sum(s.num_waiting_interactive for s in mine),
        num_waiting_batch=sum(s.num_waiting_batch for s in mine),
        num_running=sum(s.num_running for s in mine),
        kv_cache_usage=max((s.kv_cache_usage for s in mine), default=0.0),
    )


class LiveSampler:
    def __init__(
        self,
        engines: Callable[[], list[EngineSnapshot]],
        deployments: Callable[[], Iterable[DeploymentSpec]],
        actions: Callable[[str], SLOActions],
        live: LiveSeries,
        series: DeploymentSeries,
    ) -> None:
        self.engines = engines
        self.deployments = deployments
        self.actions = actions
        self.live = live
        self.series = series

    def sample(self) -> None:
        snaps = self.engines()
        self.live.sample(live_gauges(snaps))
        specs = list(self.deployments())
        for spec in specs:
            actions = self.actions(spec.name)
            canary = spec.canary.key if spec.canary is not None else None
            self.series.keep_versions(spec.name, {v.key for v in spec.versions})
            self.series.sample(
                spec.name,
                deployment_gauges(spec, snaps),
                spec.slo.ttft_p99_s,
                canary,
                actions.shed_batch,
                actions.fallback,
                roles=roles(spec),
                version_gauges={v.key: version_gauges({v.key}, snaps) for v in spec.versions},
            )
        self.series.forget({spec.name for spec in specs})
