"""What `vigil_worker_up` reports: a worker lost stays on it at 0 for an hour (VigilWorkerDown pages
on that); one that drained away on a SIGTERM (a scale-down, a rollout) leaves it."""

from __future__ import annotations

from vigil.platform.control.replicas.records import FORGET_AFTER_S
from vigil.platform.gateway.workers import HEARTBEAT_TIMEOUT_S, WorkerRegistry
from vigil.platform.wire.worker import Heartbeat, RegisterRequest, SlotReport


def _beat(registry: WorkerRegistry, worker: str, state: str, now_ts: float) -> None:
    registry.register(RegisterRequest(worker, f"http://{worker}", "cpu", 1 << 30, 1), now_ts)
    registry.heartbeat(worker, Heartbeat([SlotReport("m@1", state, 1.0)]), now_ts)  # type: ignore[arg-type]


def test_a_lost_worker_is_down_and_a_drained_one_is_not_listed() -> None:
    registry = WorkerRegistry()
    _beat(registry, "lost", "ready", now_ts=0.0)
    _beat(registry, "drained", "draining", now_ts=0.0)
    _beat(registry, "draining-now", "draining", now_ts=10.0)
    later = 10.0 + HEARTBEAT_TIMEOUT_S / 2
    assert {(r, up) for r, up, _ in registry.liveness(later)} == {
        ("lost", False),
        ("draining-now", True),  # still beating while its requests finish
    }


def test_a_worker_silent_for_an_hour_is_forgotten() -> None:
    """A pod rescheduled under a new name leaves its old name: it pages while it may come
    back, not for ever."""
    registry = WorkerRegistry()
    _beat(registry, "old-pod", "ready", now_ts=0.0)
    _beat(registry, "new-pod", "ready", now_ts=FORGET_AFTER_S)
    assert {r for r, _, _ in registry.liveness(FORGET_AFTER_S - 1)} == {"old-pod", "new-pod"}
    assert {r for r, _, _ in registry.liveness(FORGET_AFTER_S + 1)} == {"new-pod"}
    assert "old-pod" not in registry.replicas
