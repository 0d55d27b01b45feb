"""How a setting's text becomes its value, and a value its text in `--help`.

Each parser raises ValueError saying what is wrong with the text; compose.py puts the
setting's flag and variable in front, so the message names what to fix.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from vigil.platform.control.webhooks.addresses import parse_allow_entry

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
}


def parse_bytes(text: str) -> int:
    """'1073741824', '512MiB', '2GB' -> bytes."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size in bytes: {text!r} (examples: 536870912, 512MiB, 2GB)")
    unit = (m.group(2) or "").lower().removesuffix("b")
    return int(float(m.group(1)) * _UNITS[unit])


def format_bytes(value: object) -> str:
    """536870912 -> '512MiB': the largest binary unit that divides it."""
    assert isinstance(value, int), f"a size is a whole number of bytes, got {value!r}"
    for unit in ("Ti", "Gi", "Mi", "Ki"):
        if value and value % _UNITS[unit.lower()] == 0:
            return f"{value // _UNITS[unit.lower()]}{unit}B"
    return str(value)


def size(minimum: int, why: str = "") -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = parse_bytes(text)
        if value < minimum:
            raise ValueError(f"must be at least {minimum} bytes{why}, got {value}")
        return value

    return parse


def _is_fraction(text: str) -> bool:
    return text.strip().endswith("%") or re.fullmatch(r"\s*0?\.\d+\s*", text) is not None


def parse_fraction(text: str) -> float:
    """'0.5' or '50%' -> 0.5, strictly between 0 and 1."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"not a fraction: {text!r} (examples: 0.5, 50%)") from None
    if not 0 < value < 1:
        raise ValueError(f"a memory fraction must lie between 0 and 1, got {text!r}")
    return value


def memory(text: str) -> int | float:
    """Bytes ('512MiB': an int) or a fraction of the memory free ('0.8', '80%': a float)."""
    return parse_fraction(text) if _is_fraction(text) else parse_bytes(text)


def whole(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise ValueError(f"must be a whole number, got {text!r}") from None
        if number < minimum:
            raise ValueError(f"must be at least {minimum}, got {number}")
        return number

    return parse


def positive(text: str) -> float:
    """A duration (seconds or ms, as the setting's name says), more than 0."""
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"must be a number of seconds or ms, got {text!r}") from None
    if not number > 0:
        raise ValueError(f"must be positive, got {number}")
    return number


def ratio(text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"must be a number within [0, 1], got {text!r}") from None
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"must be within [0, 1], got {number}")
    return number


def boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be 1, true, yes or on (or 0, false, no, off), got {text!r}")


def negated(text: str) -> bool:
    """A switch that turns something off (--no-prefix-cache): the value of the thing."""
    return not boolean(text)


def path(text: str) -> Path:
    return Path(text)


def plain(text: str) -> str:
    return text.strip()


_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def device(text: str) -> str:
    if not _DEVICE.fullmatch(text.strip()):
        raise ValueError(f"must be auto, cpu, cuda or cuda:N, got {text!r}")
    return text.strip()


def http_url(text: str) -> str:
    """A base URL: http(s), without the trailing slash (paths are appended to it)."""
    if not text.strip().startswith(("http://", "https://")):
        raise ValueError(f"must be a URL starting with http:// or https://, got {text!r}")
    return text.strip().rstrip("/")


def public_url(text: str) -> str:
    """What people and alert receivers open: an absolute http(s) URL with a host, which
    links are made by appending paths to, so no query and no fragment."""
    url = http_url(text)
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"must name a host, e.g. https://vigil.example.com, got {text!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"must have no query or fragment (links append paths), got {text!r}")
    return url


def redis_url(text: str) -> str:
    if not text.startswith(("redis://", "rediss://")):
        raise ValueError(f"must start with redis:// or rediss://, got {text!r}")
    return text


def network(text: str) -> str:
    """An address or CIDR network, as a network: 10.0.0.7 -> 10.0.0.7/32."""
    try:
        return ipaddress.ip_network(text.strip(), strict=False).with_prefixlen
    except ValueError:
        raise ValueError(
            f"must be an IP address or CIDR network (127.0.0.1, 10.0.0.0/8), got {text!r}"
        ) from None


def webhook_target(text: str) -> str:
    parse_allow_entry(text)  # ValueError saying why not
    return text.strip()


def show(value: object) -> str:
    """A default as a flag would give it."""
    if isinstance(value, tuple):
        return ",".join(map(show, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
