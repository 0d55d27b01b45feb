"""What the admin routes are handed (router dependencies): the control plane, the
signed-in user and their name (the actor the audit log records), the SLO tracker and
the ring of kept traces."""

from __future__ import annotations

from typing import TypeAlias

from litestar.di import NamedDependency

from vigil.platform.control.access.records import UserRecord
from vigil.platform.control.plane import ControlPlane
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.telemetry.tracing import TraceRing

Plane: TypeAlias = NamedDependency[ControlPlane]
Actor: TypeAlias = NamedDependency[str]
User: TypeAlias = NamedDependency[UserRecord]
SLOs: TypeAlias = NamedDependency[SLOTracker]
Traces: TypeAlias = NamedDependency[TraceRing | None]  # None: tracing is off
