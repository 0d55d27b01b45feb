"""Deployments: stable and canary versions, the canary's share of traffic, promote and
roll back (each with an in-page review step that says what will change: versions,
revisions and both versions' SLIs side by side; no browser dialog), canary vs stable
SLIs side by side, and the earlier stable versions a roll back walks back through. Every
write sends the revision the page was drawn from; a stale one is answered 409 with who
changed the deployment since, and how, and the card redrawn."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Template

from vigil.platform.control.audit.records import AuditRecord
from vigil.platform.control.deployments.records import DeploymentRecord, VersionKey
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.versions.records import VersionStatus
from vigil.platform.errors import Conflict
from vigil.platform.slo.sli import SLI
from vigil.platform.slo.tracker import SLOTracker
from vigil.web.auth import OPERATOR, Actor
from vigil.web.deps import Plane, SLOs
from vigil.web.forms import form_of, text, whole
from vigil.web.render import render

HISTORY_SHOWN = 5  # earlier stable versions on a card (GET .../history has up to 1000)


async def _card_context(
    plane: ControlPlane, slos: SLOTracker, record: DeploymentRecord
) -> dict[str, Any]:
    spec = record.spec
    versions = [
        v
        for v in await plane.versions.list_versions(spec.stable.model)
        if v.status is not VersionStatus.RETIRED and v.ref.version != spec.stable.version
    ]
    return {
        "d": record,
        "spec": spec,
        "choices": versions,
        "slis": _slis_side_by_side(slos, record),
        # what a roll back without a canary walks back through, newest first
        "history": await plane.deployments.stable_history(record.name, HISTORY_SHOWN),
    }


def _slis_side_by_side(slos: SLOTracker, record: DeploymentRecord) -> list[dict[str, Any]]:
    """Per SLI: the stable's and the canary's good/total over the SLO window."""
    spec = record.spec
    keys = [spec.stable.key] + ([spec.canary.key] if spec.canary is not None else [])
    return _slis_of(slos, record.name, keys)


def _slis_of(slos: SLOTracker, name: str, keys: list[str]) -> list[dict[str, Any]]:
    """Per SLI: each version's good/total over the SLO window, in the order of `keys`."""
    status = slos.status(name)
    rows = []
    for sli in SLI:
        cells = []
        for key in keys:
            good, total = status.versions.get(key, {}).get(sli, (0, 0)) if status else (0, 0)
            cells.append(
                {"good": good, "total": total, "bad": (total - good) / total if total else None}
            )
        rows.append({"sli": sli.value, "cells": cells})
    return rows


def describe_change(entry: AuditRecord) -> str:
    """'otto set the canary (deployment.canary): canary_weight 0 -> 10' from an audit entry."""
    before, after = entry.before or {}, entry.after or {}
    changed = [
        f"{k} {_short(before.get(k))} → {_short(after.get(k))}"
        for k in sorted(set(before) | set(after))
        if before.get(k) != after.get(k) and k not in ("revision", "reason")
    ]
    when = entry.at.strftime("%H:%M:%S")
    return f"{entry.actor} at {when} ({entry.action}): " + (
        "; ".join(changed) or "no visible change"
    )


def _short(value: Any) -> str:
    if isinstance(value, dict) and {"model", "version"} <= set(value):
        return f"{value['model']}@{value['version']}"
    return "none" if value is None else str(value)


class DeploymentsController(Controller):
    path = "/deployments"

    @get("/")
    async def index(self, request: Request[Any, Any, Any], plane: Plane, slos: SLOs) -> Template:
        cards = [await _card_context(plane, slos, r) for r in await plane.deployments.list()]
        return render(request, "deployments/index.html", area="deployments", cards=cards)

    @get("/{name:str}")
    async def card(
        self, request: Request[Any, Any, Any], plane: Plane, slos: SLOs, name: FromPath[str]
    ) -> Template:
        record = await plane.deployments.get(name)
        return render(request, "deployments/_card.html", **await _card_context(plane, slos, record))

    @get("/{name:str}/canary/review", opt=OPERATOR)
    async def review_canary(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        slos: SLOs,
        name: FromPath[str],
        version: FromQuery[str],
        weight: FromQuery[str],
        revision: FromQuery[int],
    ) -> Template:
        """The confirm step: what the change will do, before it is made."""
        record = await plane.deployments.get(name)
        form = {"version": version, "weight": weight}
        pct = whole(form, "weight", low=0, high=100)
        return render(
            request,
            "deployments/_confirm.html",
            d=record,
            spec=record.spec,
            version=version,
            weight=pct,
            revision=revision,
        )

    @get("/{name:str}/promote/review", opt=OPERATOR)
    async def review_promote(
        self, request: Request[Any, Any, Any], plane: Plane, slos: SLOs, name: FromPath[str]
    ) -> Template:
        """Promote's confirm step: the canary replaces the stable version."""
        record = await plane.deployments.get(name)
        spec = record.spec
        if spec.canary is None:
            return _review(request, record, "promote", problem="There is no canary to promote.")
        return _review(
            request,
            record,
            "promote",
            leaving=spec.stable,
            coming=spec.canary,
            coming_revision=None,
            slis=_slis_of(slos, name, [spec.stable.key, spec.canary.key]),
        )

    @get("/{name:str}/rollback/review", opt=OPERATOR)
    async def review_rollback(
        self, request: Request[Any, Any, Any], plane: Plane, slos: SLOs, name: FromPath[str]
    ) -> Template:
        """Roll back's confirm step: the canary dropped, or the previous stable restored."""
        record = await plane.deployments.get(name)
        try:
            plan = await plane.deployments.rollback_plan(name)
        except Conflict as exc:
            return _review(request, record, "rollback", problem=exc.message)
        if plan.restores is None:  # drop the canary: the stable version stays
            coming, coming_revision = record.spec.stable, None
        else:
            coming, coming_revision = plan.restores.version, plan.restores
        return _review(
            request,
            record,
            "rollback",
            leaving=plan.leaving,
            coming=coming,
            coming_revision=coming_revision,
            slis=_slis_of(slos, name, [plan.leaving.key, coming.key]),
        )

    @post("/{name:str}/canary", opt=OPERATOR)
    async def set_canary(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        slos: SLOs,
        actor: Actor,
        name: FromPath[str],
    ) -> Template:
        form = await form_of(request)
        version, weight = text(form, "version"), whole(form, "weight", low=0, high=100)
        revision = whole(form, "revision", low=1)
        assert version is not None and weight is not None and revision is not None
        current = await plane.deployments.get(name)
        key = VersionKey(current.spec.stable.model, version)

        async def write() -> DeploymentRecord:
            return await plane.deployments.set_canary(
                name, key, weight, revision=revision, actor=actor
            )

        return await _written(
            request, plane, slos, name, write, f"{name}: {weight}% of requests to {key}."
        )

    @post("/{name:str}/promote", opt=OPERATOR)
    async def promote(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        slos: SLOs,
        actor: Actor,
        name: FromPath[str],
    ) -> Template:
        revision = whole(await form_of(request), "revision", low=1, required=False)

        async def write() -> DeploymentRecord:
            return await plane.deployments.promote(name, revision=revision, actor=actor)

        return await _written(
            request, plane, slos, name, write, f"{name}: the canary is now stable."
        )

    @post("/{name:str}/rollback", opt=OPERATOR)
    async def rollback(
        self,
        request: Request[Any, Any, Any],
        plane: Plane,
        slos: SLOs,
        actor: Actor,
        name: FromPath[str],
    ) -> Template:
        revision = whole(await form_of(request), "revision", low=1, required=False)

        before = await plane.deployments.get(name)

        async def write() -> DeploymentRecord:
            return await plane.deployments.rollback(name, revision=revision, actor=actor)

        done = (
            f"{name}: the canary is dropped."
            if before.spec.canary is not None
            else f"{name}: rolled back; the previous stable version serves again."
        )
        return await _written(request, plane, slos, name, write, done)


def _review(
    request: Request[Any, Any, Any],
    record: DeploymentRecord,
    action: str,
    problem: str | None = None,
    **change: Any,
) -> Template:
    """The in-page confirm step of promote or roll back: from -> to, with revisions and
    both versions' SLIs; or, when the action cannot be done, why."""
    return render(
        request,
        "deployments/_action_review.html",
        d=record,
        spec=record.spec,
        action=action,
        problem=problem,
        **change,
    )


async def _written(
    request: Request[Any, Any, Any],
    plane: ControlPlane,
    slos: SLOTracker,
    name: str,
    write: Callable[[], Awaitable[DeploymentRecord]],
    done: str,
) -> Template:
    """The redrawn card and a message; on a stale revision, 409 with what changed since."""
    try:
        record = await write()
    except Conflict as exc:
        if exc.code != "revision_conflict":
            raise
        record = await plane.deployments.get(name)
        changes = await plane.audit.list("deployment", name, limit=1)
        since = describe_change(changes[0]) if changes else "unknown"
        message = (
            f"Not changed: {name} was changed since this page was drawn (now revision "
            f"{record.revision}). Last change: {since}. The card below is current; "
            "check it and apply your change again."
        )
        return render(
            request,
            "deployments/_card.html",
            status_code=409,
            flash_message=message,
            flash_kind="error",
            **await _card_context(plane, slos, record),
        )
    return render(
        request,
        "deployments/_card.html",
        flash_message=done,
        flash_kind="ok",
        **await _card_context(plane, slos, record),
    )
