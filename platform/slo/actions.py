"""What the SLO loop has switched on for each deployment, read by admission.

While a deployment's SLO burns, the loop first sheds its batch traffic, then sends new
interactive requests to its fallback deployment; it switches the fallback off once the
deployment's own workers could take the load offered to it, and the shedding once the
burn has stopped (slo/loop.py decides; this only holds it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SLOActions:
    shed_batch: bool = False
    fallback: bool = False


NO_ACTIONS = SLOActions()
# A fallback ends once its deployment's forecast TTFT p99 at the load offered is within
# this share of the target: the margin that keeps one switch back from being the next
# switch over (hysteresis).
RECOVERY_SHARE = 0.8


@dataclass(frozen=True, slots=True)
class Recovery:
    """How a deployment's own workers would do under the load offered to it now: the
    capacity planner's forecast (planning/offered.py)."""

    ttft_p99_s: float  # infinite: it would queue without bound
    offered_rps: float  # interactive requests/s asked of it, wherever they went
    target_s: float

    @property
    def ok(self) -> bool:
        return self.ttft_p99_s <= RECOVERY_SHARE * self.target_s


class ActionBoard:
    def __init__(self) -> None:
        self._actions: dict[str, SLOActions] = {}

    def get(self, deployment: str) -> SLOActions:
        return self._actions.get(deployment, NO_ACTIONS)

    def set(self, deployment: str, actions: SLOActions) -> None:
        if actions == NO_ACTIONS:
            self._actions.pop(deployment, None)
        else:
            self._actions[deployment] = actions
