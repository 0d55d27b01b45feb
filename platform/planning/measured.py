"""The measured rates of a running deployment, from what its workers last reported.

Read from the gateway's live view of its workers (the heartbeats of the last seconds),
not from the database: the profile a worker sends is not stored there, and a plan is
for the workers that run the deployment now. A plan is made for the version the
deployment serves (its stable one; a canary is not planned for), on its own engine (not
a long-prompt pool's).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.errors import VigilError
from vigil.platform.gateway.serving import ServingView
from vigil.platform.planning.load import SLOTarget
from vigil.platform.planning.offered import OfferedLoad, ttft_p99_at
from vigil.platform.planning.rates import MeasuredRates, slowest
from vigil.platform.slo.actions import Recovery
from vigil.platform.wire.worker import SlotReport


@dataclass(frozen=True, slots=True)
class DeploymentRates:
    spec: DeploymentSpec
    version: VersionRef
    rates: MeasuredRates | None  # None: no worker serving it reports its step costs
    num_workers: int  # serving it now
    num_measured: int  # of those, with rates


def rates_of(report: SlotReport) -> MeasuredRates | None:
    limits, costs = report.limits, report.costs
    if limits is None or costs is None or limits.block_size == 0:
        return None
    return MeasuredRates(
        costs=costs.costs(),
        num_kv_blocks=limits.kv_capacity_tokens // limits.block_size,
        block_size=limits.block_size,
        kv_bytes_per_token=limits.kv_bytes_per_token,
        max_num_seqs=limits.max_num_seqs,
        max_num_batched_tokens=limits.max_num_batched_tokens,
        max_model_len=limits.max_model_len,
    )


def deployment_rates(view: ServingView, name: str) -> DeploymentRates:
    """Raises ModelNotFound (or InvalidRequest for an embedding model) for a bad name."""
    spec = view.deployment(name)
    version = view.serving(spec)
    replicas = view.workers.serving(version.key)
    measured = [r for rep in replicas if (r := rates_of(rep.slots[version.key])) is not None]
    return DeploymentRates(
        spec,
        version,
        slowest(measured) if measured else None,
        len(replicas),
        len(measured),
    )


async def recovery(
    view: ServingView, offered: OfferedLoad, spec: DeploymentSpec
) -> Recovery | None:
    """How the deployment's own workers would do under the interactive load offered to it
    now (a simulation of a few tens of milliseconds, off the event loop); None when no
    worker serving it reports step costs."""
    try:
        measured = deployment_rates(view, spec.name)
    except VigilError:
        return None
    if measured.rates is None:
        return None
    load = offered.load(spec.name)
    target = SLOTarget(spec.slo.ttft_p99_s, spec.slo.min_tokens_per_s)
    p99 = await asyncio.to_thread(ttft_p99_at, measured.rates, load, measured.num_measured, target)
    return Recovery(p99, load.rps if load is not None else 0.0, spec.slo.ttft_p99_s)
