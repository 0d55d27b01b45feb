"""The webhook address policy: a table of hosts refused and allowed at registration, the
operator's --webhook-allow entries, and the check at connect time on the address a name
resolves to (a resolver the test controls stands for a DNS answer that changed), which
connects to the address it checked and never to another."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest
from fakes import serving
from litestar import Litestar, Request, post

from vigil.platform.alerts.connect import webhook_client
from vigil.platform.control.webhooks.addresses import (
    AddressRefused,
    WebhookAddressPolicy,
    choose_address,
    host_refusal,
    parse_allow_entry,
)
from vigil.platform.control.webhooks.records import redacted_url
from vigil.platform.settings import SettingsError, serve_settings

STRICT = WebhookAddressPolicy()
LOOPBACK_OPEN = WebhookAddressPolicy(allow_loopback=True)

REFUSED = [
    # loopback, in every spelling
    "127.0.0.1",
    "127.255.255.254",
    "::1",
    "[::1]",
    "2130706433",  # decimal
    "0x7f000001",  # hex
    "0x7f.1",
    "017700000001",  # octal
    "0177.0.0.1",
    "127.1",  # short
    "127.0.0.1.",  # trailing dot
    # private, CGNAT, link-local and every cloud's metadata address
    "10.0.0.1",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "100.64.0.1",
    "100.100.100.200",  # Alibaba
    "169.254.169.254",  # AWS, GCP, Azure
    "192.0.0.192",  # Oracle
    "fd00:ec2::254",  # AWS IPv6
    "fe80::1",
    "fe80::1%eth0",
    "fc00::1",
    # IPv6 forms that carry an IPv4 address
    "::ffff:127.0.0.1",
    "::ffff:7f00:1",
    "::ffff:169.254.169.254",
    "::ffff:a9fe:a9fe",
    "::ffff:8.8.8.8",  # even a public one: the form itself is refused
    "::127.0.0.1",  # compatible
    "64:ff9b::a9fe:a9fe",  # NAT64
    "64:ff9b:1::1",
    "2002:a9fe:a9fe::1",  # 6to4
    "2001:0:4136:e378::1",  # Teredo
    # unspecified, multicast, reserved, benchmark, documentation
    "0.0.0.0",
    "0",
    "::",
    "224.0.0.1",
    "239.255.255.250",
    "ff02::1",
    "240.0.0.1",
    "255.255.255.255",
    "198.18.0.1",
    "192.0.2.1",
    "2001:db8::1",
    # ends in a number, but no address
    "1.2.3.4.5",
    "08.1.1.1",
    "example.123",
]

ALLOWED = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "hooks.example", "alertmanager.svc"]


@pytest.mark.parametrize("host", REFUSED)
def test_internal_and_disguised_addresses_are_refused_at_registration(host: str) -> None:
    assert host_refusal(host, STRICT) is not None


@pytest.mark.parametrize("host", ALLOWED)
def test_public_addresses_and_names_are_accepted_at_registration(host: str) -> None:
    assert host_refusal(host, STRICT) is None


def test_open_mode_on_loopback_accepts_loopback_but_not_its_disguises() -> None:
    for host in ("127.0.0.1", "::1", "127.0.0.53"):
        assert host_refusal(host, LOOPBACK_OPEN) is None
    for host in ("::ffff:127.0.0.1", "2130706433", "127.1", "10.0.0.1", "169.254.169.254"):
        assert host_refusal(host, LOOPBACK_OPEN) is not None


def test_an_operator_opens_hosts_and_networks() -> None:
    policy = WebhookAddressPolicy.of(("alertmanager.monitoring.svc", "10.96.0.0/12", "fd00::5"))
    assert host_refusal("alertmanager.monitoring.svc", policy) is None
    assert host_refusal("10.100.1.2", policy) is None
    assert host_refusal("fd00::5", policy) is None
    assert host_refusal("10.0.0.1", policy) is not None  # outside the network
    assert host_refusal("169.254.169.254", policy) is not None
    # The allowed name may resolve to an internal address; another name may not.
    assert choose_address("alertmanager.monitoring.svc", ["10.0.0.9"], policy) == "10.0.0.9"
    with pytest.raises(AddressRefused):
        choose_address("evil.example", ["10.0.0.9"], policy)
    assert choose_address("evil.example", ["10.100.0.9"], policy) == "10.100.0.9"


@pytest.mark.parametrize("entry", ["", "10.0.0.0/33", "0x7f.1", "a b", "not/a/cidr"])
def test_a_bad_allow_entry_is_an_error(entry: str) -> None:
    with pytest.raises(ValueError):
        parse_allow_entry(entry)


def test_a_name_is_refused_if_any_of_its_addresses_is() -> None:
    with pytest.raises(AddressRefused, match=r"169\.254\.169\.254"):
        choose_address("hooks.example", ["8.8.8.8", "169.254.169.254"], STRICT)
    with pytest.raises(AddressRefused):
        choose_address("hooks.example", [], STRICT)
    assert choose_address("hooks.example", ["8.8.8.8", "1.1.1.1"], STRICT) == "8.8.8.8"


def test_the_refusal_says_why() -> None:
    assert "link-local" in (host_refusal("169.254.169.254", STRICT) or "")
    assert "IPv4-mapped" in (host_refusal("::ffff:169.254.169.254", STRICT) or "")
    assert "dotted quad" in (host_refusal("2130706433", STRICT) or "")
    assert "carrier-grade NAT" in (host_refusal("100.100.100.200", STRICT) or "")


def test_every_refused_range_is_a_network() -> None:
    from vigil.platform.control.webhooks.addresses import REFUSED as RANGES

    for net, why in RANGES:
        assert ipaddress.ip_network(net) and why


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T0/B0/secret", "https://hooks.slack.com/…"),
        ("https://user:pw@pager.example:8443/x?token=t", "https://…@pager.example:8443/…"),
        ("http://[::1]:9093/api/v2/alerts", "http://[::1]:9093/…"),
        ("http://am.example/", "http://am.example/"),
        ("http://am.example?k=v", "http://am.example/…"),
    ],
)
def test_a_redacted_url_keeps_scheme_host_and_port_only(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def _echo() -> tuple[Litestar, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    @post("/hook", status_code=200)
    async def hook(request: Request[Any, Any, Any]) -> str:
        seen.append({"host": request.headers.get("host"), "body": json.loads(await request.body())})
        return "ok"

    return Litestar([hook]), seen


async def test_a_name_that_now_resolves_to_loopback_is_not_called() -> None:
    """DNS rebinding: the name was fine when registered; it now answers 127.0.0.1, where
    a receiver listens. Loopback is not allowed, so nothing reaches it."""
    app, seen = _echo()

    async def rebound(host: str) -> list[str]:
        return ["127.0.0.1"]

    async with serving(app) as url, webhook_client(STRICT, rebound) as client:
        port = url.rsplit(":", 1)[1]
        assert host_refusal("hooks.example", STRICT) is None  # as at registration
        with pytest.raises(AddressRefused, match="loopback"):
            await client.post(f"http://hooks.example:{port}/hook", json={"a": 1})
        # The same receiver by a disguised literal, whatever the resolver says:
        for host in ("[::ffff:127.0.0.1]", "2130706433", "0x7f.1", "127.1"):
            with pytest.raises(AddressRefused):
                await client.post(f"http://{host}:{port}/hook", json={"a": 1})
    assert seen == []


async def test_the_connection_goes_to_the_address_checked_under_the_name() -> None:
    """Allowed, the client connects to the resolved address it checked (the resolver is
    asked once per connection) and the receiver sees the name in Host."""
    app, seen = _echo()
    asked: list[str] = []

    async def resolver(host: str) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    async with serving(app) as url, webhook_client(LOOPBACK_OPEN, resolver) as client:
        port = url.rsplit(":", 1)[1]
        r = await client.post(f"http://receiver.test:{port}/hook", json={"a": 1})
    assert r.status_code == 200
    assert asked == ["receiver.test"]
    assert seen == [{"host": f"receiver.test:{port}", "body": {"a": 1}}]


def test_webhook_allow_comes_from_flags_or_a_comma_separated_variable() -> None:
    flags = {"webhook_allow": ["alertmanager.monitoring.svc", "10.0.0.0/8"]}
    assert serve_settings(flags, {}).webhook_allow == ("alertmanager.monitoring.svc", "10.0.0.0/8")
    env = {"VIGIL_WEBHOOK_ALLOW": "am.svc, 192.168.0.0/16", "VIGIL_WEBHOOK_TIMEOUT": "2.5"}
    settings = serve_settings({}, env)
    assert settings.webhook_allow == ("am.svc", "192.168.0.0/16")
    assert settings.webhook_timeout_s == 2.5
    assert serve_settings({}, {}).webhook_allow == ()
    with pytest.raises(SettingsError, match="webhook-allow"):
        serve_settings({"webhook_allow": ["10.0.0.0/33"]}, {})
    with pytest.raises(SettingsError, match="--webhook-timeout"):
        serve_settings({"webhook_timeout": "0"}, {})
