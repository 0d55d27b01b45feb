"""What the admin routes are handed: the control plane, and the name of the signed-in
user that the audit log records as the actor (both router dependencies)."""

from __future__ import annotations

from typing import TypeAlias

from litestar.di import NamedDependency

from vigil.platform.control.plane import ControlPlane

Plane: TypeAlias = NamedDependency[ControlPlane]
Actor: TypeAlias = NamedDependency[str]
