"""The serving view kept to what the control plane says. Read again at start (after the
start-up writes), after each admin write through this gateway (whose API keys are then
looked up again too), when another gateway announces a write, and every few seconds
(platform/loops.py); each time, the SLO targets and the offered-load memory follow the
deployments, and the tokenizers of the versions in use start loading."""

from __future__ import annotations

from vigil.platform.control.plane import ControlPlane
from vigil.platform.gateway.auth import Authenticator
from vigil.platform.gateway.serving import ServingView
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.planning.offered import OfferedLoad
from vigil.platform.slo.tracker import SLOTracker


class ServingSync:
    def __init__(
        self,
        plane: ControlPlane,
        view: ServingView,
        tokenizers: TokenizerCache,
        slos: SLOTracker,
        offered: OfferedLoad,
        auth: Authenticator,
    ) -> None:
        self.plane = plane
        self.view = view
        self.tokenizers = tokenizers
        self.slos = slos
        self.offered = offered
        self.auth = auth

    async def reload(self) -> None:
        specs = await self.plane.serving_view()
        self.view.set_deployments(specs)
        self.slos.set_targets({spec.name: spec.slo for spec in specs})
        self.offered.forget({spec.name for spec in specs})
        for version in self.view.versions_in_use():
            self.tokenizers.get(version)  # start loading early

    async def on_control_change(self) -> None:
        """After a write through this gateway's control plane: keys looked up again
        (a revoked one is refused at once), the serving view read again."""
        self.auth.forget_keys()
        await self.reload()
