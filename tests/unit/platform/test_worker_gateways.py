"""A worker serving several gateways: it registers and heart-beats with each, runs the
union of their assignments, keeps what it runs when gateways go away, and registers
again when one comes back or forgets it. Fake gateways behind an httpx transport and a
runtime that records what it is told; no sleeps (each beat is driven by the test)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import msgspec
import pytest
import torch

from vigil.platform.control.specs import bundled_version
from vigil.platform.settings import SettingsError, WorkerSettings, worker_settings
from vigil.platform.wire.worker import Assignment, SlotSpec, VersionWire
from vigil.platform.worker import gateways as gateways_module
from vigil.platform.worker.gateways import (
    LOST_WARNING_S,
    GatewayLinks,
    resolved_urls,
    union_of,
)
from vigil.platform.worker.runtime import EngineSlot

VERSION = bundled_version("smollm2-135m-instruct")


@dataclass
class FakeGateway:
    assigns: list[str]  # slot keys
    up: bool = True
    known: set[str] = field(default_factory=set)
    num_registrations: int = 0

    def answer(self, request: httpx.Request) -> httpx.Response:
        if not self.up:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        if path == "/internal/workers/register":
            self.known.add(msgspec.json.decode(request.content)["worker_id"])
            self.num_registrations += 1
        elif path.split("/")[3] not in self.known:
            return httpx.Response(404, json={"error": "unknown worker"})
        slots = [SlotSpec(key, VersionWire.of(VERSION)) for key in self.assigns]
        return httpx.Response(200, content=msgspec.json.encode(Assignment(slots)))


class FakeRuntime:
    device = torch.device("cpu")

    def __init__(self) -> None:
        self.slots: dict[str, object] = {}
        self.told: list[set[str]] = []  # each reconcile's slot keys

    def reconcile(self, desired: list[EngineSlot]) -> None:
        self.told.append({s.key for s in desired})

    def stop_drained(self) -> None:
        pass


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[dict[str, FakeGateway], FakeRuntime, GatewayLinks]]:
    gateways = {"gw-a": FakeGateway(["chat@1"]), "gw-b": FakeGateway(["chat@1", "chat@2"])}
    transport = httpx.MockTransport(lambda r: gateways[r.url.host].answer(r))
    settings = WorkerSettings(("http://gw-a:8000", "http://gw-b:8000"), "token", "w1")
    runtime = FakeRuntime()
    links = GatewayLinks(settings, runtime, "http://10.0.0.7:9000", transport)  # type: ignore[arg-type]
    try:
        yield gateways, runtime, links
    finally:
        await links.close()


async def test_the_worker_registers_with_every_gateway_and_runs_the_union(cluster) -> None:  # type: ignore[no-untyped-def]
    gateways, runtime, links = cluster
    await links.beat()
    assert [g.known for g in gateways.values()] == [{"w1"}, {"w1"}]
    assert links.num_registered == 2
    assert runtime.told[-1] == {"chat@1", "chat@2"}  # the one still on the old view too
    await links.beat()  # heartbeats now, not registrations
    assert [g.num_registrations for g in gateways.values()] == [1, 1]


async def test_a_lost_gateway_drops_out_and_losing_all_changes_nothing(cluster) -> None:  # type: ignore[no-untyped-def]
    gateways, runtime, links = cluster
    await links.beat()
    gateways["gw-b"].up = False
    await links.beat()
    assert links.num_registered == 1 and runtime.told[-1] == {"chat@1"}
    gateways["gw-a"].up = False
    num_told = len(runtime.told)
    await links.beat()
    await links.beat()
    # No gateway: the worker is told nothing, so it keeps its slots and their streams.
    assert links.num_registered == 0 and len(runtime.told) == num_told


async def test_a_gateway_that_comes_back_or_forgets_the_worker_is_registered_with_again(
    cluster,  # type: ignore[no-untyped-def]
) -> None:
    gateways, runtime, links = cluster
    await links.beat()
    gateways["gw-a"].up = False
    await links.beat()
    gateways["gw-a"] = FakeGateway(["chat@2"])  # restarted, with a newer view
    await links.beat()
    assert gateways["gw-a"].known == {"w1"} and links.num_registered == 2
    assert runtime.told[-1] == {"chat@1", "chat@2"}
    gateways["gw-b"].known.clear()  # restarted between two beats
    await links.beat()  # its 404: register again at the next beat
    assert links.num_registered == 1
    await links.beat()
    assert links.num_registered == 2 and gateways["gw-b"].num_registrations == 2


def test_union_keeps_each_slot_once_the_first_named_winning() -> None:
    a = [EngineSlot("x", VERSION, 4), EngineSlot("y", VERSION)]
    b = [EngineSlot("x", VERSION, 8), EngineSlot("z", VERSION)]
    assert union_of([a, b]) == [a[0], a[1], b[1]]
    assert union_of([]) == []


def test_gateway_urls_come_from_repeated_flags_or_comma_lists() -> None:
    def urls(flag: object, variable: str | None) -> tuple[str, ...]:
        env = {"VIGIL_WORKER_TOKEN": "t", **({"VIGIL_GATEWAY": variable} if variable else {})}
        return worker_settings({"gateway": flag}, env).gateway_urls

    assert urls(["http://a:8000/", "http://b:8000,http://c:8000"], None) == (
        "http://a:8000",
        "http://b:8000",
        "http://c:8000",
    )
    assert urls("http://a:8000", None) == ("http://a:8000",)  # the single-URL form
    assert urls(None, "http://a:8000, http://a:8000") == ("http://a:8000",)
    assert urls(["http://b:8000"], "http://a:8000") == ("http://b:8000",)
    with pytest.raises(SettingsError, match="--gateway URL"):
        urls(None, None)
    with pytest.raises(SettingsError, match="http://"):
        urls(["gateway:8000"], None)


async def test_resolved_gateways_follow_the_addresses_of_their_name() -> None:
    """Behind a headless Service: one gateway per address, as pods come and go."""
    pods = {"10.0.0.1": FakeGateway(["chat@1"]), "10.0.0.2": FakeGateway(["chat@1"])}
    addresses = ["10.0.0.1", "10.0.0.2"]
    transport = httpx.MockTransport(lambda r: pods[r.url.host].answer(r))
    settings = WorkerSettings(("http://gateways:8000",), "token", "w1", resolve_gateways=True)
    runtime = FakeRuntime()
    links = GatewayLinks(settings, runtime, "http://w1:9000", transport, lambda _: addresses)  # type: ignore[arg-type]
    try:
        await links.resolve_links()
        assert [link.url for link in links.links] == [
            "http://10.0.0.1:8000",
            "http://10.0.0.2:8000",
        ]
        await links.beat()
        assert links.num_registered == 2
        first = links.links[0]
        addresses[:] = ["10.0.0.1", "10.0.0.3"]  # a pod replaced
        pods["10.0.0.3"] = FakeGateway(["chat@1"])
        await links.resolve_links()
        assert [link.url for link in links.links] == [
            "http://10.0.0.1:8000",
            "http://10.0.0.3:8000",
        ]
        assert links.links[0] is first  # still registered: not registered again
        await links.beat()
        assert links.num_registered == 2 and pods["10.0.0.1"].num_registrations == 1
    finally:
        await links.close()


def test_resolved_urls_keep_scheme_port_and_path_per_address() -> None:
    found = resolved_urls(
        ("https://gw:8443/base", "http://other"),
        {"gw": ["fd00::2", "10.1.0.9"], "other": ["10.1.0.9"]}.__getitem__,
    )
    assert found == ["https://10.1.0.9:8443/base", "https://[fd00::2]:8443/base", "http://10.1.0.9"]


async def test_a_gateway_away_briefly_is_not_warned_about_one_away_long_is_once(
    cluster,  # type: ignore[no-untyped-def]
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`vigil serve` stopping closes its gateway a moment before its local worker: that
    is no warning. A gateway still away after LOST_WARNING_S is, once per absence."""
    gateways, _, links = cluster
    now = [100.0]
    monkeypatch.setattr(gateways_module, "clock", lambda: now[0])
    caplog.set_level("INFO", logger="vigil.platform.worker.gateways")
    await links.beat()

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]

    gateways["gw-a"].up = False
    await links.beat()
    now[0] += LOST_WARNING_S - 1
    await links.beat()
    assert warnings() == []
    assert any("gw-a" in r.getMessage() and r.levelname == "INFO" for r in caplog.records)
    now[0] += 1
    await links.beat()
    await links.beat()
    assert len(warnings()) == 1 and "gw-a" in warnings()[0] and "for 5 s" in warnings()[0]
    gateways["gw-a"].up = True
    await links.beat()  # back: registered again, and a later absence counts anew
    assert links.num_registered == 2
    gateways["gw-a"].up = False
    await links.beat()
    now[0] += LOST_WARNING_S
    await links.beat()
    assert len(warnings()) == 2


async def test_a_gateway_never_reached_is_warned_about_too(
    cluster,  # type: ignore[no-untyped-def]
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gateways, _, links = cluster
    now = [0.0]
    monkeypatch.setattr(gateways_module, "clock", lambda: now[0])
    gateways["gw-b"].up = False  # a wrong URL, or a gateway not started
    await links.beat()
    now[0] += LOST_WARNING_S
    await links.beat()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "gw-b" in warned[0]
