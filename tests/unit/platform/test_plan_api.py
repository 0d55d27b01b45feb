"""POST /api/admin/plan over a gateway's live view of its workers: a viewer may ask,
the plan reads the step costs the workers' heartbeats carry, and each refusal says what
to do (wait for a worker to load the model, fix a field, retry)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from fakes import serving
from litestar import Litestar
from litestar.openapi import OpenAPIConfig
from litestar.testing import AsyncTestClient

from vigil.engine.bundled import SMOLLM2
from vigil.platform.api.admin import ADMIN_OPENAPI_COMPONENTS, admin_router
from vigil.platform.cli import main
from vigil.platform.control.access.records import Role
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.migrate import migrate
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.specs import DeploymentSpec, SLOTargets, bundled_version
from vigil.platform.gateway.serving import ServingView
from vigil.platform.gateway.throttle import SignInThrottle
from vigil.platform.gateway.workers import WorkerRegistry
from vigil.platform.planning.command import length_spec
from vigil.platform.planning.service import PlanService
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.wire.errors import EXCEPTION_HANDLERS
from vigil.platform.wire.worker import (
    CostsWire,
    DecodePointWire,
    Heartbeat,
    RegisterRequest,
    SlotLimits,
    SlotReport,
)

VERSION = bundled_version(SMOLLM2)
HASHER = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
VIEWER = {"Authorization": "Basic " + base64.b64encode(b"eve:eve password").decode()}
LIMITS = SlotLimits(8192, 16384, 16, block_size=16, kv_bytes_per_token=46080,
                    max_num_batched_tokens=2048)  # fmt: skip
# Decode steps of 20 ms alone and 40 ms at 6; a prompt token 1 ms.
COSTS = CostsWire([DecodePointWire(1.0, 0.02), DecodePointWire(6.0, 0.04)], 0.0, 0.0, 0.001, 0.0)
BODY = {"deployment": SMOLLM2, "rps": 3.0, "prompt_tokens": 200, "output_tokens": 32}


Gateway = tuple[AsyncTestClient[Litestar], ServingView, PlanService]


def beat(registry: WorkerRegistry, worker: str, costs: CostsWire | None) -> None:
    registry.register(RegisterRequest(worker, f"http://{worker}", "cpu", 1 << 30, 1))
    report = SlotReport(VERSION.key, "ready", 1.0, limits=LIMITS, stats=None, costs=costs)
    registry.heartbeat(worker, Heartbeat([report]))


@pytest.fixture(scope="module")
def users_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plan-api") / "vigil.db"
    migrate(f"sqlite+aiosqlite:///{path}")

    async def seed() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{path}")
        plane = ControlPlane(session_factory(engine), password_hasher=HASHER)
        await plane.users.create("eve", "eve password", Role.VIEWER, actor="cli")
        await engine.dispose()

    asyncio.run(seed())
    return path


@pytest.fixture
async def app(users_db: Path) -> AsyncIterator[tuple[Litestar, ServingView, PlanService]]:
    engine = create_engine(f"sqlite+aiosqlite:///{users_db}")
    plane = ControlPlane(session_factory(engine), password_hasher=HASHER)
    view = ServingView(WorkerRegistry())
    slo = SLOTargets(ttft_p99_s=2.0, min_tokens_per_s=5.0)
    view.set_deployments([DeploymentSpec(SMOLLM2, VERSION, slo=slo)])
    planner = PlanService(view)
    app = Litestar(
        route_handlers=[admin_router(plane, SignInThrottle(), SLOTracker(), None, planner)],
        exception_handlers=EXCEPTION_HANDLERS,
        openapi_config=OpenAPIConfig(title="t", version="0", components=[ADMIN_OPENAPI_COMPONENTS]),
    )
    yield app, view, planner
    await engine.dispose()


@pytest.fixture
async def gateway(app: tuple[Litestar, ServingView, PlanService]) -> AsyncIterator[Gateway]:
    async with AsyncTestClient(app[0]) as client:
        yield client, app[1], app[2]


async def test_a_viewer_gets_a_plan_from_the_costs_workers_report(gateway: Gateway) -> None:
    client, view, _ = gateway
    beat(view.workers, "w1", COSTS)
    beat(view.workers, "w2", None)  # reports no costs: left out, counted
    response = await client.post("/api/admin/plan", json=BODY, headers=VIEWER)
    assert response.status_code == 200, response.text
    plan = response.json()
    assert plan["version"] == VERSION.key
    assert (plan["num_workers"], plan["num_workers_measured"]) == (2, 1)
    assert plan["rates"]["kv_blocks"] == 1024 and plan["rates"]["max_num_seqs"] == 16
    assert plan["rates"]["token_s"] == 0.001 and plan["rates"]["prefill_tokens_per_s"] == 1000
    assert plan["slo"] == {"ttft_p99_s": 2.0, "min_tokens_per_s": 5.0}  # the deployment's
    assert plan["workers_needed"] >= 1 and plan["binding"] in {
        "compute",
        "kv_memory",
        "batch_slots",
    }
    predicted = plan["predicted"]
    assert predicted["ttft_p99_s"] <= 2.0 and predicted["stream_tokens_per_s_p1"] >= 5.0
    assert plan["max_rps_per_worker"] * plan["workers_needed"] >= 3.0


async def test_slo_targets_in_the_body_replace_the_deployments(gateway: Gateway) -> None:
    client, view, _ = gateway
    beat(view.workers, "w1", COSTS)
    body = {**BODY, "ttft_p99_s": 0.5, "min_tokens_per_s": 1.0,
            "prompt_tokens": {"mean": 100, "p99": 400}}  # fmt: skip
    plan = (await client.post("/api/admin/plan", json=body, headers=VIEWER)).json()
    assert plan["slo"] == {"ttft_p99_s": 0.5, "min_tokens_per_s": 1.0}
    assert plan["prompt_tokens"] == {"mean": 100.0, "p99": 400.0}


async def test_a_deployment_without_costs_gets_409_saying_why(gateway: Gateway) -> None:
    client, view, _ = gateway
    beat(view.workers, "w1", None)
    response = await client.post("/api/admin/plan", json=BODY, headers=VIEWER)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "not_measured"
    assert "reports its step costs" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("change", "param", "fragment"),
    [
        ({"rps": 0}, "rps", "> 0"),
        ({"prompt_tokens": {"mean": 10, "p99": 900}}, "prompt_tokens", "log-normal"),
        ({"prompt_tokens": 16000}, "prompt_tokens", "over what one worker holds"),
        ({"output_tokens": "many"}, "output_tokens", ""),
        ({"deployment": ""}, "deployment", ""),
        ({"workers": 3}, None, "workers"),
    ],
)
async def test_bad_input_gets_400_naming_the_field(
    gateway: Gateway, change: dict[str, object], param: str | None, fragment: str
) -> None:
    client, view, _ = gateway
    beat(view.workers, "w1", COSTS)
    response = await client.post("/api/admin/plan", json={**BODY, **change}, headers=VIEWER)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert fragment in error["message"]
    if param is not None:
        assert error["param"] == param


async def test_an_unknown_deployment_gets_404_and_no_credentials_401(gateway: Gateway) -> None:
    client, view, _ = gateway
    beat(view.workers, "w1", COSTS)
    missing = await client.post(
        "/api/admin/plan", json={**BODY, "deployment": "nope"}, headers=VIEWER
    )
    assert missing.status_code == 404
    assert "Available models" in missing.json()["error"]["message"]
    unauthenticated = await client.post("/api/admin/plan", json=BODY)
    assert unauthenticated.status_code == 401


async def test_a_plan_asked_while_another_is_computed_gets_429(gateway: Gateway) -> None:
    client, view, planner = gateway
    beat(view.workers, "w1", COSTS)
    async with planner.lock:  # another plan is being computed
        busy = await client.post("/api/admin/plan", json=BODY, headers=VIEWER)
    assert busy.status_code == 429
    assert busy.headers["retry-after"] == "2"
    assert "Another plan is being computed" in busy.json()["error"]["message"]
    assert (await client.post("/api/admin/plan", json=BODY, headers=VIEWER)).status_code == 200


async def test_the_plan_is_in_the_openapi_schema(gateway: Gateway) -> None:
    client, _, _ = gateway
    schema = (await client.get("/schema/openapi.json")).json()
    operation = schema["paths"]["/api/admin/plan"]["post"]
    assert {"200", "400", "404", "409", "429"} <= set(operation["responses"])
    assert "workers_needed" in operation["description"]


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("200", 200),
        ("40,200,1000", [40, 200, 1000]),
        ("mean=200,p99=800", {"mean": 200, "p99": 800}),
    ],
)
def test_the_cli_spells_lengths_as_the_api_takes_them(text: str, spec: object) -> None:
    assert length_spec(text) == spec


async def test_vigil_plan_prints_the_plan_or_says_what_is_wrong(
    app: tuple[Litestar, ServingView, PlanService],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    asgi, view, _ = app
    beat(view.workers, "w1", COSTS)
    async with serving(asgi) as url:

        def plan(*flags: str, gateway: list[str] | None = None) -> int:
            # Heard just now: on a busy machine the worker's last beat could otherwise age
            # past the heartbeat timeout between two calls, and the plan find no worker.
            beat(view.workers, "w1", costs)
            monkeypatch.setattr("sys.stdin", io.StringIO("eve password\n"))
            given = ["--gateway", url] if gateway is None else gateway
            args = ["plan", *given, "--user", "eve", "--password-stdin"]
            return main([*args, "--deployment", SMOLLM2, *flags])

        costs: CostsWire | None = COSTS

        sizes = ["--prompt-tokens", "mean=150,p99=600", "--output-tokens", "32"]
        assert await asyncio.to_thread(plan, "--rps", "3", *sizes) == 0
        out = capsys.readouterr().out
        assert "workers needed" in out and "predicted TTFT" in out and "binding" in out
        assert "prompt mean 150 p99 600" in out
        assert await asyncio.to_thread(plan, "--rps", "3", "--json", *sizes) == 0
        assert json.loads(capsys.readouterr().out)["workers_needed"] >= 1
        # The gateway from VIGIL_GATEWAY; with neither it nor --gateway, no silent default.
        monkeypatch.setenv("VIGIL_GATEWAY", url)
        assert await asyncio.to_thread(plan, "--rps", "3", *sizes, gateway=[]) == 0
        assert "workers needed" in capsys.readouterr().out
        monkeypatch.delenv("VIGIL_GATEWAY")
        assert await asyncio.to_thread(plan, "--rps", "3", *sizes, gateway=[]) == 2
        out, err = capsys.readouterr()
        assert out == "" and "--gateway URL or VIGIL_GATEWAY" in err and "Traceback" not in err
        bad = ["--prompt-tokens", "lots", "--output-tokens", "32"]
        assert await asyncio.to_thread(plan, "--rps", "3", *bad) == 2
        assert "give tokens as 200" in capsys.readouterr().err
        # A target no number of workers meets: the plan is printed, and the exit says so.
        assert await asyncio.to_thread(plan, "--rps", "3", "--ttft-p99", "0.01", *sizes) == 1
        out = capsys.readouterr().out
        assert "none suffices" in out and "no number of workers helps" in out
        costs = None
        assert await asyncio.to_thread(plan, "--rps", "3", *sizes) == 2
        assert "409" in (err := capsys.readouterr().err) and "step costs" in err
