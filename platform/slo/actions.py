"""What the SLO loop has switched on for each deployment, read by admission.

While a deployment's SLO burns, the loop first sheds its batch traffic, then sends new
interactive requests to its fallback deployment; it switches them off again, fallback
first, once the burn has stopped long enough (slo/loop.py decides; this only holds it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SLOActions:
    shed_batch: bool = False
    fallback: bool = False


NO_ACTIONS = SLOActions()


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
