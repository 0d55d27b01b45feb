"""A deployment's SLO targets: how they are stored and the ranges they must be in."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from vigil.platform.control.deployments.tables import SLO
from vigil.platform.control.specs import SLOTargets
from vigil.platform.errors import InvalidRequest


def check_slo(slo: SLOTargets) -> SLOTargets:
    rules = (
        ("ttft_p99_s", slo.ttft_p99_s > 0, "above 0 seconds"),
        ("min_tokens_per_s", slo.min_tokens_per_s >= 0, "at least 0"),
        ("batch_shed_fraction", 0 < slo.batch_shed_fraction <= 1, "above 0 and at most 1"),
        ("availability_target", 0 < slo.availability_target < 1, "between 0 and 1, e.g. 0.999"),
        ("admission_target", 0 < slo.admission_target < 1, "between 0 and 1, e.g. 0.99"),
        ("window_s", slo.window_s >= 60, "at least 60 seconds"),
        ("rollback_min_requests", slo.rollback_min_requests >= 1, "at least 1"),
        ("rollback_margin", 0 <= slo.rollback_margin < 1, "at least 0 and below 1"),
    )
    for name, ok, expected in rules:
        if not ok:
            raise InvalidRequest(
                f"slo.{name} must be {expected}, got {getattr(slo, name)}",
                param=f"slo.{name}",
                code="invalid_value",
            )
    return slo


def slo_of(row: SLO | None) -> SLOTargets:
    if row is None:  # every deployment is written with one; defaults for a hand-made row
        return SLOTargets()
    return SLOTargets(
        ttft_p99_s=row.ttft_p99_s,
        min_tokens_per_s=row.min_tokens_per_s,
        batch_shed_fraction=row.batch_shed_fraction,
        availability_target=row.availability_target,
        window_s=row.window_s,
        auto_rollback=row.auto_rollback,
        rollback_min_requests=row.rollback_min_requests,
        rollback_margin=row.rollback_margin,
        admission_target=row.admission_target,
    )


def store_slo(row: SLO, slo: SLOTargets) -> None:
    row.ttft_p99_s = slo.ttft_p99_s
    row.min_tokens_per_s = slo.min_tokens_per_s
    row.batch_shed_fraction = slo.batch_shed_fraction
    row.availability_target = slo.availability_target
    row.window_s = slo.window_s
    row.auto_rollback = slo.auto_rollback
    row.rollback_min_requests = slo.rollback_min_requests
    row.rollback_margin = slo.rollback_margin
    row.admission_target = slo.admission_target


def slo_snapshot(slo: SLOTargets) -> dict[str, Any]:
    return asdict(slo)
