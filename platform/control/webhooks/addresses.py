"""Which addresses a webhook may call: one policy, checked when a webhook is registered
(on the URL's host, when it is an address) and again when it is called (on every
address its name resolves to, just before connecting to the one checked:
platform/alerts/connect.py), so that a name that resolves elsewhere later (DNS
rebinding) gains nothing.

Refused by default: every address that is not the public internet's. Loopback, the
private ranges, link-local (where cloud metadata answers), CGNAT (Alibaba's metadata is
100.100.100.200), the IETF protocol block (Oracle's metadata is 192.0.0.192), the test,
benchmark, multicast and reserved ranges, unique-local IPv6 (AWS's fd00:ec2::254), and
every IPv6 form that carries an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo),
since the packets it sends may reach the IPv4 address inside. An IPv4 address must be
written as a dotted quad: the decimal, hex, octal and short spellings
(2130706433, 0x7f.1, 0177.0.0.1, 127.1) are refused rather than decoded, so that no two
parsers can read one host differently.

An operator opens targets with `--webhook-allow`: a host name (as written in the URL:
every address it resolves to is then accepted) or an address or CIDR (an address inside
it is accepted whatever the name). A gateway serving open mode on loopback (the local
default) also accepts loopback receivers (127.0.0.0/8, ::1).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Each refused range, with the words a refusal says. The first that holds is named.
REFUSED: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "an unspecified ('this network') address"),
    ("127.0.0.0/8", "a loopback address"),
    ("10.0.0.0/8", "a private address"),
    ("172.16.0.0/12", "a private address"),
    ("192.168.0.0/16", "a private address"),
    ("100.64.0.0/10", "a carrier-grade NAT address (Alibaba Cloud's metadata is here)"),
    ("169.254.0.0/16", "a link-local address (cloud metadata services answer here)"),
    ("192.0.0.0/24", "an IETF protocol address (Oracle Cloud's metadata is here)"),
    ("192.0.2.0/24", "a documentation address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("192.88.99.0/24", "a 6to4 relay address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
    ("::/128", "an unspecified address"),
    ("::1/128", "a loopback address"),
    ("::ffff:0:0/96", "an IPv4-mapped IPv6 address"),
    ("::ffff:0:0:0/96", "an IPv4-translated IPv6 address"),
    ("::/96", "an IPv4-compatible IPv6 address"),
    ("::/8", "a reserved IPv6 address"),
    ("64:ff9b::/96", "a NAT64 address (it reaches the IPv4 address inside)"),
    ("64:ff9b:1::/48", "a NAT64 address (it reaches the IPv4 address inside)"),
    ("100::/64", "a discard-only address"),
    ("2001::/32", "a Teredo address (it reaches the IPv4 address inside)"),
    ("2001:db8::/32", "a documentation address"),
    ("2001::/23", "an IETF protocol address"),
    ("2002::/16", "a 6to4 address (it reaches the IPv4 address inside)"),
    ("fc00::/7", "a unique-local address (AWS's IPv6 metadata is here)"),
    ("fe80::/10", "a link-local address (cloud metadata services answer here)"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
)
_REFUSED = tuple((ipaddress.ip_network(net), why) for net, why in REFUSED)
_LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
# The last label of a host that is meant as a number (WHATWG URL's "ends in a number").
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


class AddressRefused(Exception):
    """A webhook's host, or an address it resolves to, is one the policy refuses."""


@dataclass(frozen=True, slots=True)
class WebhookAddressPolicy:
    allowed_hosts: frozenset[str] = frozenset()  # lower case, no trailing dot
    allowed_networks: tuple[IPNetwork, ...] = ()
    allow_loopback: bool = False  # open mode on a loopback host

    @classmethod
    def of(cls, allow: tuple[str, ...], *, allow_loopback: bool = False) -> WebhookAddressPolicy:
        """From --webhook-allow entries (each checked by `parse_allow_entry`)."""
        hosts, networks = [], []
        for entry in allow:
            parsed = parse_allow_entry(entry)
            if isinstance(parsed, str):
                hosts.append(parsed)
            else:
                networks.append(parsed)
        return cls(frozenset(hosts), tuple(networks), allow_loopback)


def parse_allow_entry(entry: str) -> str | IPNetwork:
    """A host name (lower case) or a network; ValueError saying why not."""
    text = entry.strip().lower().rstrip(".")
    if not text:
        raise ValueError("an empty --webhook-allow entry")
    if "/" in text or ":" in text or _looks_numeric(text):
        try:
            return ipaddress.ip_network(text.strip("[]"), strict=False)
        except ValueError:
            raise ValueError(
                f"{entry!r} is not an address or CIDR (write IPv4 as a dotted quad, "
                "e.g. 10.0.0.0/8)"
            ) from None
    if not re.fullmatch(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?", text):
        raise ValueError(f"{entry!r} is not a host name, an address or a CIDR")
    return text


def normal_host(host: str) -> str:
    return host.strip().strip("[]").lower().rstrip(".")


def _looks_numeric(host: str) -> bool:
    return bool(_NUMERIC_LABEL.match(host.rsplit(".", 1)[-1]))


def literal_address(host: str) -> IPAddress | None:
    """The address a URL's host names literally, or None for a name. An IPv4 address in
    any spelling but the dotted quad is refused (AddressRefused), as is a host that ends
    in a number but is no address."""
    text = normal_host(host)
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            raise AddressRefused(f"{host!r} is not an IPv6 address") from None
    if not _looks_numeric(text):
        return None
    try:
        return ipaddress.IPv4Address(text)  # the dotted quad, and only it
    except ValueError:
        pass
    if all(_NUMERIC_LABEL.match(label) for label in text.split(".")):
        try:
            decoded = ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            decoded = None
        if decoded is not None:
            raise AddressRefused(
                f"{host!r} spells the IPv4 address {decoded} in another form; write it as "
                "a dotted quad"
            )
    raise AddressRefused(f"{host!r} ends in a number but is not an IPv4 address")


def address_refusal(ip: IPAddress, policy: WebhookAddressPolicy) -> str | None:
    """Why a webhook may not connect to `ip` ("a loopback address"), or None when it may."""
    if getattr(ip, "scope_id", None):
        ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
    if any(ip.version == net.version and ip in net for net in policy.allowed_networks):
        return None
    if policy.allow_loopback and any(ip.version == n.version and ip in n for n in _LOOPBACK):
        return None
    for net, why in _REFUSED:
        if ip.version == net.version and ip in net:
            return why
    return None


def host_refusal(host: str, policy: WebhookAddressPolicy) -> str | None:
    """At registration: why a webhook URL's host is refused, or None. A name is
    accepted here; what it resolves to is checked at each delivery."""
    if normal_host(host) in policy.allowed_hosts:
        return None
    try:
        ip = literal_address(host)
    except AddressRefused as exc:
        return str(exc)
    if ip is None:
        return None
    why = address_refusal(ip, policy)
    return f"{ip} is {why}" if why is not None else None


def choose_address(host: str, addresses: list[str], policy: WebhookAddressPolicy) -> str:
    """At connect time: the address to connect to, of those `host` resolved to. Every
    one must be allowed (a name that answers with an internal address beside a public
    one is refused, whichever would have been tried first); AddressRefused otherwise."""
    if not addresses:
        raise AddressRefused(f"{host} resolved to no address")
    if normal_host(host) in policy.allowed_hosts:
        return addresses[0]
    for address in addresses:
        why = address_refusal(ipaddress.ip_address(address), policy)
        if why is not None:
            raise AddressRefused(f"{host} resolves to {address}, {why}")
    return addresses[0]
