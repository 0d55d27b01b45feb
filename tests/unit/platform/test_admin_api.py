"""The admin REST API on a small app (the admin router and the error handlers of
errors.py) over SQLite: Basic auth, roles, the operator's canary flow, revisions, and
4xx bodies that say what to fix."""

from __future__ import annotations

import asyncio
import base64
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from argon2 import PasswordHasher
from fakes import report_loaded
from litestar import Litestar
from litestar.openapi import OpenAPIConfig
from litestar.testing import AsyncTestClient

from vigil.engine.artifacts import artifact_checksum
from vigil.engine.bundled import MINILM, SMOLLM2, bundled_source
from vigil.platform.api.admin import ADMIN_OPENAPI_COMPONENTS, admin_router
from vigil.platform.api.body import BodyRequest
from vigil.platform.control.access.records import Role
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.migrate import migrate
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.replicas.records import ReplicaReport
from vigil.platform.control.specs import bundled_version
from vigil.platform.gateway.throttle import SignInThrottle
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.wire.errors import EXCEPTION_HANDLERS

BUNDLED = bundled_version(SMOLLM2)
DEPLOYMENT = f"/api/admin/deployments/{SMOLLM2}"
PASSWORDS = {"root": "root password", "ops": "ops password", "eve": "eve password"}


def basic(username: str, password: str | None = None) -> dict[str, str]:
    pair = f"{username}:{password or PASSWORDS[username]}".encode()
    return {"Authorization": "Basic " + base64.b64encode(pair).decode()}


ROOT, OPS, EVE = basic("root"), basic("ops"), basic("eve")


@pytest.fixture(scope="module")
def seeded_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """At head, bundled models seeded, and one user per role: root (admin), ops
    (operator), eve (viewer)."""
    path = tmp_path_factory.mktemp("admin-template") / "vigil.db"
    migrate(f"sqlite+aiosqlite:///{path}")

    async def seed() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{path}")
        plane = ControlPlane(session_factory(engine), password_hasher=FAST_HASHER)
        await plane.seed_bundled([SMOLLM2, MINILM])
        for name, role in (("root", Role.ADMIN), ("ops", Role.OPERATOR), ("eve", Role.VIEWER)):
            await plane.users.create(name, PASSWORDS[name], role, actor="cli")
        await engine.dispose()

    asyncio.run(seed())
    return path


FAST_HASHER = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


@pytest.fixture
async def plane(seeded_db: Path, tmp_path: Path) -> AsyncIterator[ControlPlane]:
    path = shutil.copy(seeded_db, tmp_path / "vigil.db")
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        yield ControlPlane(session_factory(engine), password_hasher=FAST_HASHER)
    finally:
        await engine.dispose()


@pytest.fixture
async def client(plane: ControlPlane) -> AsyncIterator[AsyncTestClient[Litestar]]:
    app = Litestar(
        route_handlers=[admin_router(plane, SignInThrottle(), SLOTracker())],
        exception_handlers=EXCEPTION_HANDLERS,
        request_class=BodyRequest,  # as create_app has it
        openapi_config=OpenAPIConfig(
            title="test", version="0", components=[ADMIN_OPENAPI_COMPONENTS]
        ),
    )
    async with AsyncTestClient(app) as c:
        yield c


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


# ---- authentication and roles


@pytest.mark.parametrize(
    "headers",
    [
        {},
        basic("root", "wrong password"),
        basic("nobody", "root password"),
        {"Authorization": "Basic not-base64!"},
        {"Authorization": "Bearer vgl_something"},
    ],
)
async def test_missing_or_wrong_credentials_get_401_with_a_basic_challenge(
    client: AsyncTestClient[Litestar], headers: dict[str, str]
) -> None:
    response = await client.get("/api/admin/deployments", headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith('Basic realm="vigil"')
    assert error_of(response)["type"] == "authentication_error"


async def test_a_disabled_user_is_refused(
    client: AsyncTestClient[Litestar], plane: ControlPlane
) -> None:
    assert (await client.get("/api/admin/models", headers=EVE)).status_code == 200
    response = await client.patch("/api/admin/users/eve", json={"disabled": True}, headers=ROOT)
    assert response.status_code == 200 and response.json()["disabled_at"] is not None
    assert (await client.get("/api/admin/models", headers=EVE)).status_code == 401


@pytest.mark.parametrize(
    ("method", "path", "body", "needed"),
    [
        (
            "POST",
            f"/api/admin/models/{SMOLLM2}/versions",
            {"version": "x", "artifact": "y"},
            "operator",
        ),
        ("POST", f"{DEPLOYMENT}/promote", None, "operator"),
        ("PUT", f"{DEPLOYMENT}/slo", {}, "operator"),
        (
            "POST",
            "/api/admin/webhooks",
            {"name": "w", "url": "https://x", "events": []},
            "operator",
        ),
        ("GET", "/api/admin/users", None, "admin"),
        ("GET", "/api/admin/keys", None, "admin"),
        ("POST", "/api/admin/keys", {"name": "k"}, "admin"),
    ],
)
async def test_a_viewer_may_not_write_and_403_names_the_role_needed(
    client: AsyncTestClient[Litestar],
    method: str,
    path: str,
    body: dict[str, Any] | None,
    needed: str,
) -> None:
    response = await client.request(method, path, json=body, headers=EVE)
    assert response.status_code == 403
    error = error_of(response)
    assert f"needs the '{needed}' role" in error["message"]
    assert "'eve' has the 'viewer' role" in error["message"]


async def test_what_each_role_may_read(client: AsyncTestClient[Litestar]) -> None:
    viewer_paths = [
        "/api/admin/models",
        f"/api/admin/models/{SMOLLM2}",
        f"/api/admin/models/{SMOLLM2}/versions",
        "/api/admin/deployments",
        DEPLOYMENT,
        f"{DEPLOYMENT}/slo",
        "/api/admin/webhooks",
        "/api/admin/audit",
        "/api/admin/replicas",
    ]
    for path in viewer_paths:
        assert (await client.get(path, headers=EVE)).status_code == 200, path
    for path in ("/api/admin/users", "/api/admin/keys"):
        assert (await client.get(path, headers=OPS)).status_code == 403
        assert (await client.get(path, headers=ROOT)).status_code == 200


# ---- the operator's flow


async def test_operator_registers_a_version_canaries_promotes_and_rolls_back(
    client: AsyncTestClient[Litestar], plane: ControlPlane
) -> None:
    reloads: list[int] = []

    async def reload() -> None:
        reloads.append(len(await plane.serving_view()))

    plane.add_listener(reload)
    response = await client.post(
        f"/api/admin/models/{SMOLLM2}/versions",
        json={
            "version": "warm",
            "artifact": f"bundled:{SMOLLM2}",
            "params": {"temperature": 0.7, "stop": ["###"], "max_tokens": 64},
        },
        headers=OPS,
    )
    assert response.status_code == 201, response.text
    version = response.json()
    assert (version["key"], version["format"], version["status"]) == (
        f"{SMOLLM2}@warm",
        "gguf",
        "registered",
    )
    assert version["checksum"] == artifact_checksum(bundled_source(SMOLLM2).path)
    assert version["params"] == {"temperature": 0.7, "stop": ["###"], "max_tokens": 64}

    early = await client.post(
        f"{DEPLOYMENT}/canary", json={"version": "warm", "weight": 10}, headers=OPS
    )
    assert early.status_code == 409 and error_of(early)["code"] == "version_not_ready"
    await report_loaded(plane, SMOLLM2, "warm")
    await report_loaded(plane, SMOLLM2, BUNDLED.version)
    canary = await client.post(
        f"{DEPLOYMENT}/canary", json={"version": "warm", "weight": 10}, headers=OPS
    )
    assert canary.status_code == 200, canary.text
    body = canary.json()
    assert body["canary"] == {"model": SMOLLM2, "version": "warm"}
    assert (body["canary_weight"], body["revision"]) == (10, 2)

    promoted = await client.post(f"{DEPLOYMENT}/promote", json={"revision": 2}, headers=OPS)
    assert promoted.status_code == 200, promoted.text
    assert promoted.json()["stable"]["version"] == "warm" and promoted.json()["canary"] is None

    back = {"version": BUNDLED.version, "weight": 5}
    assert (await client.post(f"{DEPLOYMENT}/canary", json=back, headers=OPS)).status_code == 200
    rolled = await client.post(f"{DEPLOYMENT}/rollback", headers=OPS)
    assert rolled.status_code == 200, rolled.text
    assert (rolled.json()["stable"]["version"], rolled.json()["canary"]) == ("warm", None)
    assert rolled.json()["revision"] == 5
    assert len(reloads) == 5  # one per write, after it committed

    audit = await client.get(
        "/api/admin/audit",
        params={"entity_type": "deployment", "entity_name": SMOLLM2, "limit": 4},
        headers=EVE,
    )
    assert audit.status_code == 200
    entries = audit.json()
    assert [(e["actor"], e["action"]) for e in entries] == [
        ("ops", "deployment.rollback"),
        ("ops", "deployment.canary"),
        ("ops", "deployment.promote"),
        ("ops", "deployment.canary"),
    ]
    promote = entries[2]
    assert (promote["before"]["stable"], promote["after"]["stable"]) == (
        BUNDLED.key,
        f"{SMOLLM2}@warm",
    )
    assert (promote["before"]["revision"], promote["after"]["revision"]) == (2, 3)
    registered = await client.get(
        "/api/admin/audit", params={"entity_type": "version"}, headers=EVE
    )
    assert registered.json()[0]["action"] == "version.register"
    assert registered.json()[0]["actor"] == "ops"

    # and the version in use cannot be retired
    retire = await client.post(f"/api/admin/models/{SMOLLM2}/versions/warm/retire", headers=OPS)
    assert retire.status_code == 409
    assert f"still served by deployment(s) {SMOLLM2}" in error_of(retire)["message"]

    # without a canary, roll back undoes the promotion; then there is nothing left to undo
    undone = await client.post(f"{DEPLOYMENT}/rollback", json={"revision": 5}, headers=OPS)
    assert undone.status_code == 200, undone.text
    assert (undone.json()["stable"]["version"], undone.json()["revision"]) == (
        BUNDLED.version, 6
    )  # fmt: skip
    again = await client.post(f"{DEPLOYMENT}/rollback", headers=OPS)
    assert again.status_code == 409 and error_of(again)["code"] == "nothing_to_roll_back"
    history = (await client.get(f"{DEPLOYMENT}/history", headers=EVE)).json()
    assert [(h["version"]["version"], h["action"], h["revision"]) for h in history] == [
        ("warm", "deployment.rollback", 5),
        (BUNDLED.version, "deployment.promote", 2),
    ]
    assert history[0]["restored_at"] is None and history[1]["restored_at"] is not None


async def test_create_and_patch_a_deployment_with_a_stale_revision_409(
    client: AsyncTestClient[Litestar],
) -> None:
    created = await client.post(
        "/api/admin/deployments",
        json={
            "name": "chat",
            "model": SMOLLM2,
            "version": BUNDLED.version,
            "max_tokens": 256,
            "fallback": {"deployment": SMOLLM2, "trigger": "queue_wait", "threshold_s": 2.0},
            "slo": {"ttft_p99_s": 1.0},
        },
        headers=OPS,
    )
    assert created.status_code == 201, created.text
    assert created.json()["revision"] == 1 and created.json()["slo"]["ttft_p99_s"] == 1.0
    assert created.json()["limits"]["interactive"] == {"max_queue": 64, "max_queue_wait_s": 30.0}

    patched = await client.patch(
        "/api/admin/deployments/chat",
        json={"revision": 1, "max_tokens": None, "fallback": None},
        headers=OPS,
    )
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert (body["revision"], body["max_tokens"], body["fallback"]) == (2, None, None)

    stale = await client.patch(
        "/api/admin/deployments/chat", json={"revision": 1, "max_tokens": 8}, headers=OPS
    )
    assert stale.status_code == 409
    error = error_of(stale)
    assert "is at revision 2, not 1" in error["message"]
    assert (error["type"], error["param"], error["code"]) == (
        "conflict_error",
        "revision",
        "revision_conflict",
    )
    stale_promote = await client.post(
        "/api/admin/deployments/chat/promote", json={"revision": 1}, headers=OPS
    )
    assert stale_promote.status_code == 409


async def test_slo_get_and_put(client: AsyncTestClient[Litestar]) -> None:
    target = {"ttft_p99_s": 1.5, "min_tokens_per_s": 4.0, "availability_target": 0.99}
    put = await client.put(f"{DEPLOYMENT}/slo", json=target, headers=OPS)
    assert put.status_code == 200, put.text
    got = (await client.get(f"{DEPLOYMENT}/slo", headers=EVE)).json()
    assert got == put.json()
    assert {k: got[k] for k in target} == target
    # Left out: the defaults, the workbook's 30-day window and 99% of interactive
    # requests admitted.
    assert (got["window_s"], got["admission_target"]) == (2_592_000.0, 0.99)
    shed = {**target, "admission_target": 0.95}
    put = await client.put(f"{DEPLOYMENT}/slo", json=shed, headers=OPS)
    assert put.status_code == 200 and put.json()["admission_target"] == 0.95


# ---- 4xx bodies that say what to fix


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "param", "mentions"),
    [
        (
            "POST",
            f"{DEPLOYMENT}/canary",
            {"version": "warm", "weight": 150},
            400,
            "weight",
            "<= 100",
        ),
        (
            "POST",
            f"{DEPLOYMENT}/canary",
            {"version": "nope", "weight": 10},
            400,
            "canary.version",
            "not registered",
        ),
        (
            "POST",
            f"{DEPLOYMENT}/canary",
            {"version": "warm", "wieght": 10},
            400,
            "wieght",
            "unknown field",
        ),
        ("PATCH", DEPLOYMENT, {"max_tokens": 8}, 400, "revision", "missing required field"),
        (
            "POST",
            f"/api/admin/models/{SMOLLM2}/versions",
            {"version": "v2", "artifact": f"bundled:{SMOLLM2}", "checksum": "ab" * 32},
            400,
            "checksum",
            "does not match",
        ),
        (
            "POST",
            f"/api/admin/models/{SMOLLM2}/versions",
            {"version": "v2", "artifact": "/no/such/file.gguf"},
            400,
            "artifact",
            "inside the model directories",
        ),
        (
            "POST",
            f"/api/admin/models/{SMOLLM2}/versions",
            {"version": "v2", "artifact": f"bundled:{SMOLLM2}", "params": {"top_p": 0}},
            400,
            "params.top_p",
            "above 0",
        ),
        (
            "POST",
            f"/api/admin/models/{SMOLLM2}/versions",
            {"version": "v2", "artifact": f"bundled:{SMOLLM2}", "params": {"quantization": "q2"}},
            400,
            "params.quantization",
            "quantization (none, int4, int8, auto)",
        ),
        (
            "POST",
            f"/api/admin/models/{SMOLLM2}/versions",
            {"version": "v2", "artifact": f"bundled:{SMOLLM2}", "params": {"tool_parser": "x"}},
            400,
            "params.tool_parser",
            "tool_parser (hermes, llama3_json)",
        ),
        (
            "POST",
            f"/api/admin/models/{SMOLLM2}/versions",
            {"version": "v2", "artifact": f"bundled:{SMOLLM2}", "params": {"stop": ["a"] * 17}},
            400,
            "params.stop",
            "stop (a list of 1 to 16 non-empty strings)",
        ),
        (
            "POST",
            "/api/admin/models/ghost/versions",
            {"version": "v2", "artifact": f"bundled:{SMOLLM2}"},
            404,
            "model",
            "no model is named 'ghost'",
        ),
        (
            "POST",
            "/api/admin/deployments/ghost/promote",
            None,
            404,
            "deployment",
            "GET /api/admin/deployments lists them",
        ),
        ("POST", f"{DEPLOYMENT}/promote", None, 409, None, "has no canary to promote"),
        (
            "POST",
            "/api/admin/deployments",
            {
                "name": "x",
                "model": MINILM,
                "version": bundled_version(MINILM).version,
                "max_tokens": 5,
            },
            400,
            "max_tokens",
            "generation deployments only",
        ),
        (
            "POST",
            "/api/admin/deployments",
            {
                "name": "x",
                "model": SMOLLM2,
                "version": BUNDLED.version,
                "fallback": {"deployment": "ghost", "trigger": "queue_wait", "threshold_s": 1},
            },
            400,
            "fallback.deployment",
            "'ghost' does not exist",
        ),
        (
            "POST",
            "/api/admin/deployments",
            {"name": SMOLLM2, "model": SMOLLM2, "version": BUNDLED.version},
            409,
            "name",
            "already exists",
        ),
        (
            "PUT",
            f"{DEPLOYMENT}/slo",
            {"batch_shed_fraction": 2},
            400,
            "slo.batch_shed_fraction",
            "at most 1",
        ),
        (
            "PUT",
            f"{DEPLOYMENT}/slo",
            {"admission_target": 1.0},
            400,
            "slo.admission_target",
            "between 0 and 1",
        ),
        ("GET", "/api/admin/audit?limit=5000", None, 400, "limit", "limit"),
    ],
)
async def test_errors_say_what_to_fix(
    client: AsyncTestClient[Litestar],
    plane: ControlPlane,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
    param: str | None,
    mentions: str,
) -> None:
    await plane.versions.register_version(SMOLLM2, "warm", f"bundled:{SMOLLM2}", actor="ops")
    response = await client.request(method, path, json=body, headers=OPS)
    assert response.status_code == status, response.text
    error = error_of(response)
    assert error["param"] == param
    assert mentions in error["message"]


@pytest.mark.parametrize(
    ("method", "path", "body", "param", "valid"),
    [
        (
            "POST",
            "/api/admin/deployments",
            {
                "name": "x",
                "model": SMOLLM2,
                "version": BUNDLED.version,
                "fallback": {"deployment": SMOLLM2, "trigger": "soon", "threshold_s": 1},
            },
            "fallback.trigger",
            "queue_wait, predicted_ttft",
        ),
        (
            "PATCH",
            DEPLOYMENT,
            {
                "revision": 1,
                "fallback": {"deployment": SMOLLM2, "trigger": "soon", "threshold_s": 1},
            },
            "fallback.trigger",
            "queue_wait, predicted_ttft",
        ),
        (
            "POST",
            "/api/admin/webhooks",
            {"name": "w", "url": "https://pager.example/", "events": ["shed"], "format": "slack"},
            "format",
            "alertmanager_webhook, alertmanager_api",
        ),
        ("GET", "/api/admin/alerts?state=open", None, "state", "firing, resolved"),
        (
            "POST",
            "/api/admin/users",
            {"username": "u", "password": "a long password", "role": "root"},
            "role",
            "viewer, operator, admin",
        ),
        (
            "POST",
            "/api/admin/keys",
            {"name": "k", "priority": "urgent"},
            "priority",
            "batch, interactive",
        ),
    ],
)
async def test_an_invalid_enum_value_gets_a_400_that_lists_the_valid_ones(
    client: AsyncTestClient[Litestar],
    method: str,
    path: str,
    body: dict[str, Any] | None,
    param: str,
    valid: str,
) -> None:
    response = await client.request(method, path, json=body, headers=ROOT)
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["param"] == param  # as the client names it (a query parameter's alias)
    assert f"valid values: {valid}." in error["message"], error["message"]


# ---- webhooks, keys, users


async def test_webhook_secret_is_shown_once(client: AsyncTestClient[Litestar]) -> None:
    created = await client.post(
        "/api/admin/webhooks",
        json={"name": "oncall", "url": "https://hooks.example/a", "events": ["slo.burn"]},
        headers=OPS,
    )
    assert created.status_code == 201, created.text
    secret = created.json()["secret"]
    listed = await client.get("/api/admin/webhooks", headers=EVE)
    assert secret not in listed.text and listed.json()[0]["secret_hint"] == "..." + secret[-4:]
    patched = await client.patch(
        "/api/admin/webhooks/oncall", json={"events": ["shed", "worker.down"]}, headers=OPS
    )
    assert patched.json()["events"] == ["shed", "worker.down"]
    deleted = await client.delete("/api/admin/webhooks/oncall", headers=OPS)
    assert deleted.status_code == 200 and deleted.json()["name"] == "oncall"
    assert (await client.delete("/api/admin/webhooks/oncall", headers=OPS)).status_code == 404
    audit = await client.get("/api/admin/audit", params={"entity_type": "webhook"}, headers=EVE)
    assert len(audit.json()) == 3 and secret not in audit.text


async def test_admin_manages_keys_and_users(client: AsyncTestClient[Litestar]) -> None:
    created = await client.post(
        "/api/admin/keys",
        json={"name": "ci", "priority": "batch", "models": [SMOLLM2], "rate_limit_per_minute": 60},
        headers=ROOT,
    )
    assert created.status_code == 201, created.text
    key = created.json()["key"]
    assert key.startswith(created.json()["key_prefix"])
    listed = await client.get("/api/admin/keys", headers=ROOT)
    assert key not in listed.text and listed.json()[0]["priority"] == "batch"
    revoked = await client.post("/api/admin/keys/ci/revoke", headers=ROOT)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    again = await client.post("/api/admin/keys/ci/revoke", headers=ROOT)
    assert again.status_code == 409 and "already revoked" in error_of(again)["message"]

    user = await client.post(
        "/api/admin/users",
        json={"username": "dan", "password": "dan password", "role": "operator"},
        headers=ROOT,
    )
    assert user.status_code == 201 and user.json()["role"] == "operator"
    assert "password" not in user.text
    dan = basic("dan", "dan password")
    assert (await client.get(f"{DEPLOYMENT}/slo", headers=dan)).status_code == 200
    demoted = await client.patch("/api/admin/users/dan", json={"role": "viewer"}, headers=ROOT)
    assert demoted.json()["role"] == "viewer"
    assert (await client.post(f"{DEPLOYMENT}/rollback", headers=dan)).status_code == 403
    last = await client.patch("/api/admin/users/root", json={"role": "viewer"}, headers=ROOT)
    assert last.status_code == 409 and "last active admin" in error_of(last)["message"]
    actions = await client.get("/api/admin/audit", params={"entity_type": "user"}, headers=ROOT)
    assert [(e["actor"], e["action"]) for e in actions.json()[:2]] == [
        ("root", "user.update"),
        ("root", "user.create"),
    ]


async def test_an_admin_ends_every_console_session_of_a_user(
    client: AsyncTestClient[Litestar], plane: ControlPlane
) -> None:
    before = (await plane.users.get("ops")).session_epoch
    r = await client.post("/api/admin/users/ops/sign-out", headers=ROOT)
    assert r.status_code == 200 and r.json()["username"] == "ops"
    assert (await plane.users.get("ops")).session_epoch == before + 1
    assert (await client.post("/api/admin/users/root/sign-out", headers=OPS)).status_code == 403
    missing = await client.post("/api/admin/users/nobody/sign-out", headers=ROOT)
    assert missing.status_code == 404 and error_of(missing)["param"] == "username"
    actions = await client.get("/api/admin/audit", params={"entity_type": "user"}, headers=ROOT)
    assert (actions.json()[0]["actor"], actions.json()[0]["action"]) == (
        "root",
        "user.sign_out_everywhere",
    )


async def test_the_openapi_schema_documents_the_admin_api(
    client: AsyncTestClient[Litestar],
) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    assert schema["components"]["securitySchemes"]["vigilBasic"]["scheme"] == "basic"
    operations = [
        (path, method, op)
        for path, item in schema["paths"].items()
        if path.startswith("/api/admin/")
        for method, op in item.items()
    ]
    assert len(operations) >= 25
    for path, method, op in operations:
        assert op["tags"] == ["Admin"], (path, method)
        assert op["security"] == [{"vigilBasic": []}], (path, method)
        assert {"401", "403"} <= set(op["responses"]), (path, method)
    patch = schema["paths"]["/api/admin/deployments/{name}"]["patch"]
    assert "409" in patch["responses"]


# ---- what a page on another site could make a signed-in browser send


@pytest.mark.parametrize(
    "browser",
    [
        {"origin": "https://evil.example"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},  # a sibling subdomain is another site's page too
        {"origin": "null"},  # a sandboxed frame or a data: page
    ],
)
async def test_a_write_from_another_site_is_refused_before_credentials_count(
    client: AsyncTestClient[Litestar], browser: dict[str, str]
) -> None:
    body = {"username": "mallory", "password": "correct horse battery", "role": "admin"}
    r = await client.post("/api/admin/users", json=body, headers={**ROOT, **browser})
    assert r.status_code == 403 and error_of(r)["code"] == "cross_site_request"
    promote = await client.post(f"{DEPLOYMENT}/promote", headers={**OPS, **browser})
    assert promote.status_code == 403  # a write without a body is refused the same way
    assert (await client.get("/api/admin/users", headers={**ROOT, **browser})).status_code == 200
    users = (await client.get("/api/admin/users", headers=ROOT)).json()
    assert "mallory" not in [u["username"] for u in users]


async def test_the_consoles_own_page_and_scripts_may_write(
    client: AsyncTestClient[Litestar],
) -> None:
    same = {"origin": "http://testserver.local", "host": "testserver.local"}
    body = {"username": "trent", "password": "correct horse battery", "role": "viewer"}
    r = await client.post("/api/admin/users", json=body, headers={**ROOT, **same})
    assert r.status_code == 201, r.text
    typed = {"sec-fetch-site": "none"}  # typed into the address bar, or a bookmark
    body = {**body, "username": "trudy"}
    assert (
        await client.post("/api/admin/users", json=body, headers={**ROOT, **typed})
    ).status_code == 201


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("POST", "/api/admin/plan", EVE),
        ("POST", "/api/admin/users", ROOT),
        ("PATCH", DEPLOYMENT, OPS),
        ("POST", "/api/admin/webhooks", OPS),
    ],
)
async def test_a_body_nested_very_deep_is_a_400_on_the_admin_api(
    client: AsyncTestClient[Litestar], method: str, path: str, headers: dict[str, str]
) -> None:
    for body in (DEEP, b'{"name": ' + DEEP + b"}"):
        r = await client.request(
            method, path, content=body, headers={**headers, "content-type": "application/json"}
        )
        assert r.status_code == 400, r.text
        error = error_of(r)
        assert error["code"] == "invalid_json" and "nested too deeply" in error["message"]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_admin_bodies_must_be_json(
    client: AsyncTestClient[Litestar], content_type: str | None
) -> None:
    payload = b'{"username": "mallory", "password": "correct horse battery", "role": "admin"}'
    headers = {**ROOT} | ({"content-type": content_type} if content_type else {})
    r = await client.post("/api/admin/users", content=payload, headers=headers)
    assert r.status_code == 415 and error_of(r)["code"] == "unsupported_media_type"


async def test_a_viewer_reads_no_audit_entries_about_users_or_keys(
    client: AsyncTestClient[Litestar],
) -> None:
    await client.post("/api/admin/keys", json={"name": "ci"}, headers=ROOT)
    admin_view = (await client.get("/api/admin/audit", headers=ROOT)).json()
    assert {"user", "key"} <= {e["entity_type"] for e in admin_view}
    viewer = (await client.get("/api/admin/audit", headers=EVE)).json()
    assert viewer and not {"user", "key"} & {e["entity_type"] for e in viewer}
    asked = await client.get("/api/admin/audit", params={"entity_type": "user"}, headers=EVE)
    assert asked.status_code == 200 and asked.json() == []


async def test_guessed_passwords_lock_the_username_with_429_and_an_audit_entry(
    client: AsyncTestClient[Litestar], plane: ControlPlane
) -> None:
    wrong = basic("root", "not the password")
    codes = [(await client.get("/api/admin/models", headers=wrong)).status_code for _ in range(11)]
    assert codes == [401] * 10 + [429]
    locked = await client.get("/api/admin/models", headers=ROOT)  # even the right password
    assert locked.status_code == 429 and error_of(locked)["code"] == "too_many_sign_in_failures"
    assert 0 < int(locked.headers["retry-after"]) <= 300
    assert (await client.get("/api/admin/models", headers=OPS)).status_code == 200
    entries = await plane.audit.list("user", "root")
    [entry] = [e for e in entries if e.action == "sign_in.locked_out"]
    assert entry.actor == "system"
    assert entry.after == {"username": "root", "failures": 10}


async def test_a_made_up_usernames_lockout_writes_no_audit_entry(
    client: AsyncTestClient[Litestar], plane: ControlPlane
) -> None:
    wrong = basic("ghost", "not the password")
    codes = [(await client.get("/api/admin/models", headers=wrong)).status_code for _ in range(11)]
    assert codes == [401] * 10 + [429]
    entries = await plane.audit.list("user", "ghost")
    assert [e for e in entries if e.action == "sign_in.locked_out"] == []


async def test_an_operator_sets_and_clears_a_shadow_and_the_audit_log_says_so(
    client: AsyncTestClient[Litestar], plane: ControlPlane
) -> None:
    await plane.versions.register_version(SMOLLM2, "next", f"bundled:{SMOLLM2}", actor="ops")
    path = f"{DEPLOYMENT}/shadow"

    async def put(body: dict[str, Any], headers: dict[str, str] = OPS) -> httpx.Response:
        return await client.put(path, headers=headers, json=body)

    r = await put({"version": "next", "weight": 20})  # no worker needs it ready
    assert r.status_code == 200, r.text
    assert r.json()["shadow"] == {"model": SMOLLM2, "version": "next"}
    assert r.json()["shadow_weight"] == 20
    same = error_of(await put({"version": BUNDLED.version, "weight": 5}))
    assert same["param"] == "shadow.version" and "already the stable version" in same["message"]
    assert error_of(await put({"version": "nope", "weight": 5}))["code"] == "version_not_found"
    assert (await put({"version": "next", "weight": 101})).status_code == 400
    assert (await put({"version": "next", "weight": 5}, headers=EVE)).status_code == 403
    cleared = await client.delete(path, headers=OPS)
    assert cleared.status_code == 200 and cleared.json()["shadow"] is None
    audit = (await client.get("/api/admin/audit", headers=OPS)).json()
    assert {"deployment.shadow", "deployment.shadow_clear"} <= {e["action"] for e in audit}


# ---- workers as Prometheus scrape targets


async def test_workers_not_down_are_listed_as_prometheus_scrape_targets(
    client: AsyncTestClient[Litestar], plane: ControlPlane
) -> None:
    await plane.replicas.register(ReplicaReport("w1", "http://10.0.0.1:9001", "cuda:0", 1 << 30))
    await plane.replicas.register(ReplicaReport("w2", "https://gpu2:9001", "cuda:0", 1 << 30))
    await plane.replicas.register(ReplicaReport("w3", "http://10.0.0.3:9001", "cuda:0", 1 << 30))
    await plane.replicas.mark_down("w3")
    response = await client.get("/api/admin/replicas/scrape-targets", headers=EVE)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert sorted(response.json(), key=lambda t: t["labels"]["replica"]) == [
        {"targets": ["10.0.0.1:9001"], "labels": {"replica": "w1"}},
        {"targets": ["gpu2:9001"], "labels": {"replica": "w2", "__scheme__": "https"}},
    ]
    assert (await client.get("/api/admin/replicas/scrape-targets")).status_code == 401


async def test_audit_and_decisions_lists_filter_and_page_as_the_console_does(
    client: AsyncTestClient[Litestar], plane: ControlPlane
) -> None:
    for i in range(3):
        await plane.audit.record("ops", "deployment.note", "deployment", f"d{i}", {})
        await plane.alerts.decide(SMOLLM2, "shed_batch", "on", f"burn {i}", {"n": i})
    first = await client.get(
        "/api/admin/audit", params={"action": "deployment.note", "limit": 2}, headers=EVE
    )
    assert [e["entity_name"] for e in first.json()] == ["d2", "d1"]
    link = first.headers["link"]
    assert link.endswith('>; rel="next"') and "action=deployment.note" in link
    rest = await client.get(link[1 : link.index(">")], headers=EVE)
    assert [e["entity_name"] for e in rest.json()] == ["d0"] and "link" not in rest.headers
    since = await client.get("/api/admin/audit", params={"since": "2999-01-01"}, headers=EVE)
    assert since.status_code == 200 and since.json() == []

    decisions = await client.get(
        "/api/admin/decisions", params={"kind": "shed_batch", "limit": 1}, headers=EVE
    )
    assert [d["reason"] for d in decisions.json()] == ["burn 2"]
    assert 'rel="next"' in decisions.headers["link"]

    for path, params, param, message in [
        ("/api/admin/audit", {"min_duration_ms": 5}, "min_duration_ms", "this list takes action"),
        ("/api/admin/audit", {"entity_type": "robot"}, "entity_type", "one of deployment, key"),
        ("/api/admin/audit", {"until": "noon"}, "until", "ISO 8601"),
        ("/api/admin/decisions", {"kind": "panic"}, "kind", "one of shed_batch, fallback"),
        ("/api/admin/decisions", {"actor": "ops"}, "actor", "deployment, kind, limit"),
    ]:
        answer = await client.get(path, params=params, headers=EVE)
        assert answer.status_code == 400, (params, answer.text)
        error = error_of(answer)
        assert error["param"] == param and message in error["message"], error
