"""The gateway's background loops, started with the application and stopped with it:

live sampler      once a second, a point of the live numbers (telemetry/sampling.py),
                  the charts' history saved every SERIES_SAVE_EVERY points and at stop;
                  every VIEW_RELOAD_EVERY points, the serving view read again (another
                  gateway on the database may have changed it) and the replicas gone
                  silent marked down (a worker.down decision and webhook, unless it
                  was draining) or, down for an hour, forgotten; every
                  SESSION_PURGE_EVERY, expired console sessions deleted
changes           other gateways' admin writes, heard (PostgreSQL); this gateway's
                  announced to them
loop owner        which gateway runs the SLO loop and webhook delivery (one does:
                  control/ownership.py)
SLO loop          once a second, on the owner: alerts, actions, canary checks
webhook delivery  on the owner
"""

from __future__ import annotations

import asyncio
import logging

from vigil.platform.alerts.delivery import WebhookDelivery
from vigil.platform.control.changes import ChangeFeed
from vigil.platform.control.db import utcnow
from vigil.platform.control.ownership import LoopOwnership
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.replicas.records import ReplicaRecord, ReplicaStatus
from vigil.platform.control.webhooks.records import WebhookEvent
from vigil.platform.gateway.fleet import REPLICA_WRITE_S
from vigil.platform.gateway.serving_sync import ServingSync
from vigil.platform.gateway.workers import HEARTBEAT_TIMEOUT_S
from vigil.platform.slo.loop import SLOLoop
from vigil.platform.telemetry.sampling import LiveSampler
from vigil.platform.telemetry.series_file import SAVE_EVERY_S, SeriesFile

log = logging.getLogger(__name__)

LIVE_SAMPLE_INTERVAL_S = 1.0
VIEW_RELOAD_EVERY = 5  # samples
SESSION_PURGE_EVERY = 300  # samples: expired console sessions deleted every 5 minutes
SERIES_SAVE_EVERY = SAVE_EVERY_S  # samples: the charts' history written to its file
SLO_INTERVAL_S = 1.0
# A live worker's row is written only every REPLICA_WRITE_S: older than that plus the
# heartbeat timeout is silence, not the gap between writes.
REPLICA_SILENT_S = REPLICA_WRITE_S + HEARTBEAT_TIMEOUT_S


class BackgroundLoops:
    def __init__(
        self,
        sampler: LiveSampler,
        serving: ServingSync,
        plane: ControlPlane,
        ownership: LoopOwnership,
        slo_loop: SLOLoop,
        delivery: WebhookDelivery,
        changes: ChangeFeed,
        series_file: SeriesFile | None = None,
    ) -> None:
        self.sampler = sampler
        self.serving = serving
        self.plane = plane
        self.ownership = ownership
        self.slo_loop = slo_loop
        self.delivery = delivery
        self.changes = changes
        self.series_file = series_file
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """After the serving view's first read: writes announced and heard, and every
        loop running."""
        assert not self._tasks, "the background loops are already running"
        if self.series_file is not None:
            restored = await asyncio.to_thread(self.series_file.load)
            if restored:
                log.info("console charts: %d points restored from before the restart", restored)
        self.plane.add_listener(self.changes.announce)  # other gateways first
        self.plane.add_listener(self.serving.on_control_change)
        if self.ownership.is_owner:  # SQLite: always; PostgreSQL: once the lock is taken
            await self.slo_loop.start()
        owner = self.ownership
        self._tasks = [
            asyncio.create_task(self._sample_live(), name="live-sampler"),
            asyncio.create_task(self.changes.run(self.serving.on_control_change), name="changes"),
            asyncio.create_task(owner.run(self.on_loop_owner), name="loop-owner"),
            asyncio.create_task(self._watch_slos(), name="slo-loop"),
            asyncio.create_task(self.delivery.run(lambda: owner.is_owner), name="webhook-delivery"),
        ]

    async def stop(self) -> None:
        """Every loop cancelled and awaited, and the webhook client closed."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self.series_file is not None:
            await asyncio.to_thread(self.series_file.save)
        await self.delivery.client.aclose()

    async def on_loop_owner(self, owner: bool) -> None:
        """This gateway took the SLO loop and webhook delivery over (it picks up the
        alerts firing, so none is sent again), or handed them on (what it had switched
        on is switched off here; the new owner decides afresh)."""
        if owner:
            await self.slo_loop.start()
            self.plane.outbox_written.set()
        else:
            self.slo_loop.stand_down()

    async def _sample_live(self) -> None:
        n = 0
        while True:
            self.sampler.sample()
            n += 1
            if n % VIEW_RELOAD_EVERY == 0:
                try:
                    await self.serving.reload()
                    for replica in await self.plane.replicas.mark_silent_down(REPLICA_SILENT_S):
                        await worker_lost(self.plane, replica)
                except Exception:  # serving goes on with the view it has
                    log.exception("could not reload the serving view")
            if self.series_file is not None and n % SERIES_SAVE_EVERY == 0:
                await asyncio.to_thread(self.series_file.save)
            if n % SESSION_PURGE_EVERY == 0:
                try:
                    await self.plane.sessions.purge_expired()
                except Exception:  # they are refused when read anyway
                    log.exception("could not delete expired console sessions")
            await asyncio.sleep(LIVE_SAMPLE_INTERVAL_S)

    async def _watch_slos(self) -> None:
        while True:
            try:
                if self.ownership.is_owner:
                    await self.slo_loop.tick()
            except Exception:  # the next tick tries again
                log.exception("the SLO loop failed")
            await asyncio.sleep(SLO_INTERVAL_S)


async def worker_lost(plane: ControlPlane, replica: ReplicaRecord) -> None:
    """A worker gone silent is a decision of its own, sent to the webhooks that asked
    for worker.down; one that was draining left on purpose (a scale-down, a rollout)
    and is only marked down."""
    if replica.status is ReplicaStatus.DRAINING:
        return
    silent_s = (utcnow() - replica.last_heartbeat_at).total_seconds()
    versions = ", ".join(replica.versions) or "nothing"
    reason = (
        f"worker {replica.id} ({replica.address}) silent for {silent_s:.0f} s, "
        f"serving {versions}: its traffic goes to the other workers"
    )
    details = {
        "worker": replica.id,
        "address": replica.address,
        "silent_s": round(silent_s, 1),
        "versions": list(replica.versions),
    }
    await plane.alerts.decide("", "worker", "down", reason, details, WebhookEvent.WORKER_DOWN)
