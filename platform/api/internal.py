"""`/internal/workers/*`: where workers register and heart-beat (worker token only; not
in the public API schema). Each answer is the worker's assignment."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, post
from litestar.di import NamedDependency, Provide
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, JSONBody

from vigil.platform.gateway.fleet import FleetBook
from vigil.platform.gateway.serving import ServingView
from vigil.platform.gateway.workers import WorkerRegistry
from vigil.platform.wire.worker import (
    Assignment,
    Heartbeat,
    RegisterRequest,
    require_worker_token,
)


async def _worker_token(
    request: Request[Any, Any, Any], worker_token: NamedDependency[str]
) -> None:
    require_worker_token(request.headers.get("authorization"), worker_token)


class WorkerController(Controller):
    path = "/internal/workers"
    include_in_schema = False
    dependencies = {"_auth": Provide(_worker_token)}  # noqa: RUF012

    @post("/register", status_code=200)
    async def register(
        self,
        data: JSONBody[RegisterRequest],
        workers: NamedDependency[WorkerRegistry],
        fleet: NamedDependency[FleetBook],
        view: NamedDependency[ServingView],
        _auth: NamedDependency[None],
    ) -> Assignment:
        workers.register(data)
        await fleet.record_replica(data.worker_id, registering=True)
        await fleet.on_workers_changed()
        return Assignment(view.desired_slots())

    @post("/{worker_id:str}/heartbeat", status_code=200)
    async def heartbeat(
        self,
        worker_id: FromPath[str],
        data: JSONBody[Heartbeat],
        workers: NamedDependency[WorkerRegistry],
        fleet: NamedDependency[FleetBook],
        view: NamedDependency[ServingView],
        _auth: NamedDependency[None],
    ) -> Assignment:
        if not workers.heartbeat(worker_id, data):
            raise NotFoundException(f"unknown worker {worker_id}: register again")
        await fleet.record_replica(worker_id)
        await fleet.on_workers_changed()
        return Assignment(view.desired_slots())
