"""A real `vigil serve --redis-url` on a private `redis-server`, which the test kills:
the admin API, the console's sign-in and a rate-limited key keep working, with their
limits counted in the gateway's memory; /readyz and /metrics say Redis is unreachable;
when Redis is back the counts are shared through it again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from redis_server import PrivateRedis

from vigil.platform.gateway.shared_counts import MAX_RETRY_S
from vigil.platform.gateway.throttle import SignInLimits

pytestmark = pytest.mark.slow

ROOT = ("root", "root password 1")
OTTO = ("otto", "otto password 1")
LIMITS = SignInLimits()


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    redis = PrivateRedis(tmp_path_factory.mktemp("redis-outage"))
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


@pytest.fixture(scope="module")
def server(redis, tmp_path_factory, launch_vigil, create_user) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    data_dir = tmp_path_factory.mktemp("redis-outage-vigil")
    create_user(data_dir, *ROOT, role="admin")
    create_user(data_dir, *OTTO, role="operator")
    flags = ("all-minilm-l6-v2", "--redis-url", redis.url)
    with launch_vigil(data_dir, *flags) as s:
        yield s


def client(server: Any, address: str = "127.0.0.1") -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=server.base_url, transport=transport, timeout=30)


def redis_metrics(server: Any) -> dict[str, float]:
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    lines = [line.split() for line in text.splitlines() if line.startswith("vigil_redis_")]
    return {name: float(value) for name, value in lines}


def console_sign_in(server: Any, username: str, password: str) -> httpx.Response:
    with client(server) as c:
        c.get("/console/login")
        form = {"username": username, "password": password, "_csrf_token": c.cookies["vigil_csrf"]}
        return c.post("/console/login", data=form)


def test_with_redis_gone_the_gateway_keeps_serving_and_limiting_then_shares_again(
    server: Any, redis: PrivateRedis
) -> None:
    with client(server) as c:
        created = c.post(
            "/api/admin/keys", json={"name": "limited", "rate_limit_per_minute": 3}, auth=ROOT
        )
        assert created.status_code == 201, created.text
        key = {"Authorization": f"Bearer {created.json()['key']}"}
        assert c.get("/readyz").json()["redis"] == "up"
    assert redis_metrics(server)["vigil_redis_up"] == 1.0

    redis.stop()
    with client(server) as c:
        assert c.get("/api/admin/users", auth=ROOT).status_code == 200
        wrong = c.get("/api/admin/users", auth=("root", "not it"))
        assert wrong.status_code == 401, wrong.text
        codes = [c.get("/v1/models", headers=key).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429], codes  # the key's rate, counted here
        ready = c.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["status"] == "degraded" and ready.json()["redis"] == "unreachable"
    signed_in = console_sign_in(server, *OTTO)
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/console/"
    assert console_sign_in(server, "otto", "not it").status_code == 401
    with client(server, "127.0.0.2") as c:  # the throttle still holds, in memory
        num = LIMITS.max_failures_per_user
        codes = [
            c.get("/api/admin/users", auth=("root", "guess")).status_code for _ in range(num + 1)
        ]
        assert codes == [401] * (num - 1) + [429] * 2, codes  # 'not it' above was one of them
    metrics = redis_metrics(server)
    assert metrics["vigil_redis_up"] == 0.0 and metrics["vigil_redis_errors_total"] >= 1

    redis.start()
    deadline = time.monotonic() + 2 * MAX_RETRY_S
    while httpx.get(f"{server.base_url}/readyz").json().get("redis") != "up":
        assert time.monotonic() < deadline, "Redis back, and /readyz does not say so"
        time.sleep(0.5)
    assert redis_metrics(server)["vigil_redis_up"] == 1.0
    with client(server, "127.0.0.3") as c:
        assert c.get("/api/admin/users", auth=("otto", "guess")).status_code == 401
    assert "sign-in/user/otto" in redis.command("keys", "*")  # shared again
