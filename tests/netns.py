"""Test hosts made of Linux network namespaces: a gateway host reached from this one, and
worker hosts each joined to the gateway host by a point-to-point veth pair (a /30).

    this host --veth-- gateway host --veth-- worker host 1
                                   \\--veth-- worker host 2

Names carry a random suffix, so runs never collide; `hosts()` removes everything it made.
Needs root and `ip netns`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"vprobe{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def ip(*args: str, netns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, text=True)


@dataclass(frozen=True)
class Link:
    """One end of a /30 in a namespace: its interface and address, the peer's address."""

    netns: str
    device: str
    address: str
    peer_address: str


@dataclass(frozen=True)
class Hosts:
    gateway_ns: str
    gateway_address: str  # as this host reaches it
    workers: dict[str, Link]  # worker name -> its end of the link to the gateway host

    def cut(self, worker: str) -> None:
        """The worker host drops off the network: packets to it vanish, no reset."""
        link = self.workers[worker]
        ip("link", "set", link.device, "down", netns=link.netns)

    def heal(self, worker: str) -> None:
        link = self.workers[worker]
        ip("link", "set", link.device, "up", netns=link.netns)


def _veth(suffix: str, a_ns: str | None, b_ns: str, subnet: str) -> tuple[Link | None, Link]:
    """A veth pair between `a_ns` (None: this host) and `b_ns` on `subnet`.1/.2 (a /30)."""
    a_dev, b_dev = f"va{suffix}", f"vb{suffix}"
    ip("link", "add", a_dev, "type", "veth", "peer", "name", b_dev)
    if a_ns is not None:
        ip("link", "set", a_dev, "netns", a_ns)
    ip("link", "set", b_dev, "netns", b_ns)
    a_addr, b_addr = f"{subnet}.1", f"{subnet}.2"
    ip("addr", "add", f"{a_addr}/30", "dev", a_dev, netns=a_ns)
    ip("link", "set", a_dev, "up", netns=a_ns)
    ip("addr", "add", f"{b_addr}/30", "dev", b_dev, netns=b_ns)
    ip("link", "set", b_dev, "up", netns=b_ns)
    a = Link(a_ns, a_dev, a_addr, b_addr) if a_ns is not None else None
    return a, Link(b_ns, b_dev, b_addr, a_addr)


@contextlib.contextmanager
def hosts(worker_names: list[str]) -> Iterator[Hosts]:
    run = secrets.token_hex(3)  # interface names stay under 16 characters
    net = f"10.{100 + secrets.randbelow(150)}"
    gateway_ns = f"vigil-gw-{run}"
    made: list[str] = []
    try:
        for ns in [gateway_ns, *(f"vigil-{w}-{run}" for w in worker_names)]:
            ip("netns", "add", ns)
            made.append(ns)
            ip("link", "set", "lo", "up", netns=ns)
        _, gateway_end = _veth(f"c{run}", None, gateway_ns, f"{net}.0")
        workers = {}
        for i, name in enumerate(worker_names, start=1):
            _, worker_end = _veth(f"{i}{run}", gateway_ns, f"vigil-{name}-{run}", f"{net}.{i}")
            workers[name] = worker_end
        yield Hosts(gateway_ns, gateway_end.address, workers)
    finally:
        # Deleting a namespace deletes the veth ends in it, and so their peers.
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", f"vac{run}"], capture_output=True)
